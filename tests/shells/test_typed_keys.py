"""The bytes a write's keys and text put on a pane's terminal, exactly.

The loader's keys are control bytes (``C-x C-_ r``): they go as ``send-keys -H``, which every tmux
types as they are. Typed through ``send-keys -l`` with the payload (one command fewer for tmux)
they arrive the same on tmux 3.3, but tmux 3.5 passes a C0 byte without modifiers through its
key encoder, which writes nothing for it in the extended-keys modes (``extended-keys always`` in
a user's ``~/.tmux.conf``): the run would never start."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hang import HANG_S
from tether.config import load_config
from tether.shells.hosts.local import LocalHost
from tether.shells.integration import payload
from tether.shells.integration.script import ACCEPT_KEYS, LOAD_KEYS, RUN_KEYS
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo

# Reads the terminal raw (every byte as typed, nothing echoed or translated) until it has ``N``
# bytes, then writes them to a file; says it is raw before the first key is sent.
_RECORDER = """
import os, sys, tty, termios
tty.setraw(0, termios.TCSANOW)
open(sys.argv[2], "w").close()
want, data = int(sys.argv[1]), b""
while len(data) < want:
    data += os.read(0, 65536)
with open(sys.argv[3], "wb") as fh:
    fh.write(data)
"""

WRITES: list[tuple[bytes, str]] = [
    (RUN_KEYS, payload.run_payload(12345, "echo hi é")),  # a run
    (LOAD_KEYS, payload.held_payload("x" * 5000 + "\n")),  # past one command's 4096 characters
    (ACCEPT_KEYS, ""),  # keys alone
    (b"", "plain text"),  # text alone
]


async def test_keys_go_as_bytes_and_text_as_text_and_reach_the_terminal_exactly(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = LocalHost(load_config(tether_home))
    expected = b"".join(keys + text.encode("utf-8") for keys, text in WRITES)
    ready, got = tmp_path / "raw", tmp_path / "got"
    script = tmp_path / "recorder.py"
    script.write_text(_RECORDER)
    sent: list[list[tuple[str, ...]]] = []
    real = host.control.run_many

    async def recorded(cmds: list[tuple[str, ...]], **kw: Any) -> list[list[str]]:
        sent.append(list(cmds))
        return await real(cmds, **kw)

    try:
        argv = [sys.executable, str(script), str(len(expected)), str(ready), str(got)]
        await host.control.run("new-session", "-d", "-s", "rec", "-x", "80", "-y", "24", " ".join(argv))
        (pane_id,) = await host.control.run("display-message", "-p", "-t", "rec", "#{pane_id}")
        pane = PaneInfo(
            shell_id="rec", pane_id=pane_id, pid=0, tty="", attached=0, cwd="", user_input_ms=0,
            cols=80, rows=24, in_mode=False,
        )  # fmt: skip
        with anyio.fail_after(HANG_S):
            while not ready.exists():
                await asyncio.sleep(0.01)
        monkeypatch.setattr(host.control, "run_many", recorded)
        for keys, text in WRITES:
            await host.type_keys_then_text(pane, keys, text, now=True)
        with anyio.fail_after(HANG_S):
            while not got.exists() or got.stat().st_size < len(expected):
                await asyncio.sleep(0.01)
        assert got.read_bytes() == expected
        # The keys as bytes tmux types literally, then the payload as text, in one write.
        run_payload = WRITES[0][1]
        assert sent[0] == [
            commands.leave_copy_mode(pane_id),
            commands.send_bytes(pane_id, RUN_KEYS),
            commands.send_literal(pane_id, run_payload),
        ]
        assert [c[3] for c in sent[1][1:]] == ["-H", "-l", "-l"]  # the text in two pieces
    finally:
        await host.control.run("kill-server")
        await host.control.close()
