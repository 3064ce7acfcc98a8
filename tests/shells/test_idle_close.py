"""The idle sweep closes only shells idle past their own limit, never a busy one."""

from __future__ import annotations

from pathlib import Path

from tether.config import load_config
from tether.shells import Shells, Write, open_shell, run
from tether.shells.idle import close_idle, idle_limit_ms
from tether.shells.records import now_ms
from tether.shells.requests import Output, Safety, Wait


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
        w = Write(
            shell_id=busy.id,
            actor="t",
            wait=Wait(kind="noproc", proc="nothing-like-it", timeout_ms=5000),
            output=Output(),
            safety=Safety(),
        )
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
