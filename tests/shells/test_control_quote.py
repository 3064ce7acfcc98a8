"""Every argument reaches tmux's command parser exactly as given, whether its command's line is
built afresh or taken from the cache of the lines a call repeats (the listings, with their
formats); text typed into a shell is never kept by any cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.shells.tmux import control as control_module
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
async def test_an_argument_arrives_exact_each_time(tether_home: Path, text: str) -> None:
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    saved = tether_home / "buffer"
    try:
        for _ in range(2):  # the same text twice: quoted afresh both times, the same bytes
            await client.run("set-buffer", "-b", "q", "--", text)
            await client.run("save-buffer", "-b", "q", str(saved))  # the buffer's exact bytes
            assert saved.read_bytes() == text.encode("utf-8", "surrogateescape")
            saved.unlink()
    finally:
        await client.run("kill-server")
        await client.close()


async def test_a_reply_longer_than_a_read_arrives_whole_and_in_order(tether_home: Path) -> None:
    # The reader takes tmux's output a chunk at a time and cuts the lines itself: a line cut by a
    # chunk's end, a line longer than a chunk, and the replies after them arrive exact.
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    lines = [f"line {n} " + "y" * (n * 997 % 5000) for n in range(200)]
    lines.insert(100, "z" * (3 * control_module._CHUNK + 17))
    text = "\n".join(lines)
    try:
        await client.run("set-buffer", "-b", "big", "--", text)
        shown, after = await client.run_many(
            [("show-buffer", "-b", "big"), ("display-message", "-p", "after")]
        )
        assert shown == lines
        assert after == ["after"]
    finally:
        await client.run("kill-server")
        await client.close()


def test_text_typed_is_never_kept_with_the_repeated_commands() -> None:
    # The lines of the commands a call repeats for every shell are kept; text typed into a shell
    # (it may be a secret a program's prompt reads) never is.
    # No cache of the control client's module is asked for them: neither the lines' nor any
    # other (an argument cache once kept every short argument, a secret pasted for a prompt too).
    caches = {name: obj for name, obj in vars(control_module).items() if hasattr(obj, "cache_info")}
    cached = control_module._cached_line
    before = {name: c.cache_info() for name, c in caches.items()}
    for secret in ("s3cret", "a" * 40, "tab\tvalue"):
        control_module._line(("send-keys", "-t", "%1", "-l", "--", secret))
        control_module._line(("send-keys", "-t", "%1", "-l", "--", "\x18\x1fr", secret))  # a run's keys
        control_module._line(("set-buffer", "-b", "tether-x", "--", secret))
        control_module._line(("send-keys", "-t", "%1", "-H", *(f"{b:02x}" for b in secret.encode())))
    after = cached.cache_info()
    for name, c in caches.items():
        now = c.cache_info()
        assert (now.hits, now.misses) == (before[name].hits, before[name].misses), name
    listing = ("display-message", "-p", "-t", "=dsh-abc123:", "#{pane_id}\t#{pane_pid}")
    assert control_module._line(listing) == control_module.command_line(listing).encode() + b"\n"
    assert control_module._line(listing) == control_module.command_line(listing).encode() + b"\n"
    assert cached.cache_info().hits > after.hits
