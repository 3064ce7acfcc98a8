"""A key for what is in front waits while the shell itself works on a running line.

bash forks a line's command and only then hands it the terminal; a ``C-c`` typed in between
signals the shell, which keeps it until that command ends: the command never sees it (on a busy
machine the gap lasts tens of milliseconds, and ``shell_run`` with ``wait: none`` followed at once
by ``shell_send`` ``C-c`` fell in it: ``sleep 1000`` ran on). That gap cannot be held open from
outside, so here the shell's own work is a loop of builtins that ends when a file appears, created
by a spy on the host's ``starting`` once the key has been seen waiting for the shell twice. The key must reach
the command the line starts after the loop; typed at once, it would stop the loop instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from hang import HANG_MS, HANG_S
from tether.config import load_config
from tether.shells import Shells, open_shell, run, send
from tether.shells.requests import SendAction, Wait
from tether.shells.tmux.commands import PaneInfo
from writes import until, write


async def test_c_c_reaches_the_job_the_line_starts_after_the_shells_work(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Shells.get(load_config(tether_home))
    try:
        shell, _ = await open_shell(
            engine, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
        )
        gate, looped = tmp_path / "gate", tmp_path / "looped"
        line = f"echo polling; until [ -e {gate} ]; do :; done; : > {looped}; sleep 1000"
        polling = Wait(kind="match", pattern="polling", regex=re.compile("polling"), timeout_ms=HANG_MS)
        started = await run(engine, write(shell.id, polling), line)
        assert started.met is True, started

        host, _ = await engine.pane(shell.id)
        real_starting, real_send_keys = host.starting, host.send_keys
        seen_working, typed = 0, False

        async def starting(pane: PaneInfo) -> bool:
            nonlocal seen_working
            busy = await real_starting(pane)
            if busy and not typed:
                seen_working += 1
                if seen_working == 2:  # the key is being held: let the shell go on to `sleep`
                    gate.touch()
            return busy

        async def send_keys(pane: PaneInfo, keys: Sequence[str]) -> None:
            nonlocal typed
            typed = typed or bool(keys)
            await real_send_keys(pane, keys)

        monkeypatch.setattr(host, "starting", starting)
        monkeypatch.setattr(host, "send_keys", send_keys)
        await send(engine, write(shell.id, Wait()), SendAction(text="", keys=("C-c",)))
        monkeypatch.undo()
        assert typed and gate.exists(), "the key was typed while the shell still worked in front"

        # The loop ran to its end and `sleep` took the C-c: the shell comes back to its prompt
        # with the line's status 130 (once sleep has died and bash has drawn the prompt: on a busy
        # machine, not yet when the send returns). Typed at once, the C-c would have stopped the
        # loop (no `looped`).
        with anyio.fail_after(HANG_S):
            while (activity := engine.activity(shell.id)) is None or activity.phase != "prompt":
                await anyio.sleep(0.01)
        after = await run(engine, write(shell.id, until("exit")), "echo status=$?")
        assert after.exit_code == 0 and "status=130" in after.lines, after
        assert looped.exists() and seen_working >= 2
    finally:
        await engine.close()
