"""Every argument reaches tmux's command parser exactly as given, whether ``quote`` builds it or
takes it from its cache (short arguments, the listings' formats, are quoted once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.shells.tmux.control import ControlClient

_LONG = "x" * 300

CASES = [
    "plain text",
    "it's a 'quote'",
    "tab\there\tand\tthere",
    "#{pane_id}\t#{pane_pid}",
    'dollar $HOME "double" back\\slash ~tilde',
    "bell\x07 escape\x1b[0m del\x7f",
    "raw \udcff\udc80 bytes",
    "line\nbreak",
    'tab\t$HOME "double" back\\slash ~tilde',  # double quotes: each of these escaped
    _LONG + "\t" + _LONG,  # past the cache's length: quoted afresh every time
    _LONG + "'" + _LONG,
]


@pytest.mark.parametrize("text", CASES)
async def test_an_argument_arrives_exact_quoted_afresh_or_from_the_cache(
    tether_home: Path, text: str
) -> None:
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    saved = tether_home / "buffer"
    try:
        for _ in range(2):  # the second time, a short argument's quoting comes from the cache
            await client.run("set-buffer", "-b", "q", "--", text)
            await client.run("save-buffer", "-b", "q", str(saved))  # the buffer's exact bytes
            assert saved.read_bytes() == text.encode("utf-8", "surrogateescape")
            saved.unlink()
    finally:
        await client.run("kill-server")
        await client.close()
