"""The idle sweep closes only shells idle past their own limit, never a busy one."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from hang import HANG_S
from tether.config import load_config
from tether.shells import Shells, open_shell, run
from tether.shells.idle import close_idle, idle_limit_ms, sweep_once
from tether.shells.records import now_ms
from tether.shells.requests import Wait
from writes import write


def test_limits() -> None:
    assert idle_limit_ms(5, switch=False, default_minutes=60) == 300_000
    assert idle_limit_ms(0, switch=True, default_minutes=60) == 0
    assert idle_limit_ms(None, switch=True, default_minutes=60) == 3_600_000
    assert idle_limit_ms(None, switch=False, default_minutes=60) == 0


async def test_sweep_closes_idle_shells_only(tether_home: Path, tmp_path: Path) -> None:
    engine = Shells.get(load_config(tether_home))
    try:
        idle, _ = await open_shell(
            engine, owner="t", label="i", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=1
        )
        never, _ = await open_shell(
            engine, owner="t", label="n", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=0
        )
        busy, _ = await open_shell(
            engine, owner="t", label="b", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=1
        )
        w = write(busy.id, Wait(kind="noproc", proc="nothing-like-it", timeout_ms=5000))
        await run(engine, w, "sleep 30")
        host, pane = await engine.pane(busy.id)
        assert not (await host.foreground(pane)).shell_in_front
        assert await close_idle(engine, now_ms()) == []  # nobody idle for a minute yet
        closed = await close_idle(engine, now_ms() + 2 * 60_000)
        assert closed == [idle.id]
        live = await engine.live()
        assert idle.id not in live and never.id in live and busy.id in live
        assert idle.id not in engine.records.shells()
    finally:
        await engine.close()


async def test_a_sweep_of_a_home_without_shells_starts_no_tmux_server(
    tether_home: Path, tmp_path: Path
) -> None:
    """A process that never opened a shell (the command line's tools process, an idle server)
    sweeps every 30 s: it must not start a tmux server to find nothing there."""
    engine = Shells.get(load_config(tether_home))
    try:
        assert await sweep_once(engine, set()) == set()
        assert not (tether_home / "tmux.sock").exists()
        # With a shell open the sweep still asks tmux: a shell that ended is seen, then removed.
        shell, _ = await open_shell(
            engine, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
        )
        _, pane = await engine.pane(shell.id)
        os.kill(pane.pid, signal.SIGKILL)
        seen: set[str] = set()
        deadline = time.monotonic() + HANG_S
        while shell.id not in seen:  # tmux notices the pane's end on its own time
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)  # pacing a poll of tmux's state, bounded by the deadline
            seen = await sweep_once(engine, set())
        assert await sweep_once(engine, seen) == set()
        assert shell.id not in await engine.ended()
    finally:
        await engine.close()
