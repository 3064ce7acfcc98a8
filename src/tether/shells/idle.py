"""Closing shells that stayed idle too long (``shell_open`` ``idleMinutes``, ``[sessions]`` switch).

Invariant: a shell is closed only when it is idle in the spec's sense — no input for its limit
(runs, sends, steps and a person's keystrokes through the panel count; reading does not) and the
shell itself in front (no foreground command) — and its limit is positive: ``idleMinutes`` when
given at open, else ``idle_close_minutes`` when the ``idle_close`` master switch is on, else never.
Closing snapshots the shell (``manage_ops.close``), kills the tmux session and marks the record
closed. Every tether process may run the
sweep; closing an already-closed shell is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tether.shells import lifecycle as manage_ops
from tether.shells import procinfo
from tether.shells.records import now_ms

if TYPE_CHECKING:
    from tether.shells.engine import SessionEngine

logger = logging.getLogger(__name__)

SWEEP_S = 30.0


def idle_limit_ms(idle_minutes: int | None, *, switch: bool, default_minutes: int) -> int:
    if idle_minutes is not None:
        return idle_minutes * 60_000
    return default_minutes * 60_000 if switch else 0


async def close_idle(engine: SessionEngine, now: int) -> list[str]:
    """One sweep at time ``now`` (epoch ms); returns the ids it closed."""
    cfg = engine.config.sessions
    records = engine.records.shells()
    closed: list[str] = []
    for shell_id, pane in (await engine.live()).items():
        rec = records.get(shell_id)
        if rec is None:
            continue
        limit = idle_limit_ms(rec.idle_minutes, switch=cfg.idle_close, default_minutes=cfg.idle_close_minutes)
        if limit <= 0:
            continue
        last_input = max(rec.last_activity_ms, pane.user_input_ms)
        if now - last_input < limit or not procinfo.foreground(pane.pid).shell_in_front:
            continue
        # A snapshot first (manage_ops.close), so shell_open from can revive it.
        await manage_ops.close(engine, shell_id, actor="idle-sweep", reason="idle", at_ms=now)
        closed.append(shell_id)
        logger.info("closed %s: idle for %d minutes", shell_id, (now - last_input) // 60_000)
    return closed


async def sweep_forever(engine: SessionEngine) -> None:
    while True:
        await asyncio.sleep(SWEEP_S)
        try:
            await close_idle(engine, now_ms())
        except Exception:
            logger.exception("idle sweep failed")
