"""Closing shells that stayed idle too long (``shell_open`` ``idleMinutes``, ``[sessions]`` switch).

Invariant: a shell is closed only when it is idle in the spec's sense — no input for its limit
(runs, sends, steps and a person's keystrokes through the panel count; reading does not) and the
shell itself in front (no foreground command) — and its limit is positive: ``idleMinutes`` when
given at open, else ``idle_close_minutes`` when the ``idle_close`` master switch is on, else never.
Closing snapshots the shell (``lifecycle.close``), kills the tmux session and marks the record
closed. Every tether process may run the
sweep; closing an already-closed shell is a no-op. The same sweep removes closed shells past
``[sessions] keep_closed_days`` (``retention``), at most once an hour per home.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from tether.errors import NotFoundError
from tether.shells import retention
from tether.shells.records import now_ms
from tether.shells.tmux.control import SessionError

if TYPE_CHECKING:
    from tether.shells.domain import Shells

logger = logging.getLogger(__name__)

SWEEP_S = 30.0


def idle_limit_ms(idle_minutes: int | None, *, switch: bool, default_minutes: int) -> int:
    if idle_minutes is not None:
        return idle_minutes * 60_000
    return default_minutes * 60_000 if switch else 0


async def close_idle(shells: Shells, now: int) -> list[str]:
    """One sweep at time ``now`` (epoch ms); returns the ids it closed."""
    from tether.shells import lifecycle

    cfg = shells.config.sessions
    records = shells.records.shells()
    closed: list[str] = []
    for shell_id, pane in (await shells.live()).items():
        rec = records.get(shell_id)
        if rec is None:
            continue
        limit = idle_limit_ms(rec.idle_minutes, switch=cfg.idle_close, default_minutes=cfg.idle_close_minutes)
        if limit <= 0:
            continue
        last_input = max(rec.last_activity_ms, pane.user_input_ms)
        host = shells.host_of(shell_id)
        if now - last_input < limit or not (await host.foreground(pane)).shell_in_front:
            continue
        # A snapshot first (lifecycle.close), so shell_open from can revive it.
        try:
            await lifecycle.close(shells, shell_id, actor="idle-sweep", reason="idle", at_ms=now)
        except NotFoundError:
            continue  # closed meanwhile by another call (another process's sweep, a person)
        closed.append(shell_id)
        logger.info("closed %s: idle for %d minutes", shell_id, (now - last_input) // 60_000)
    return closed


async def remove_ended(shells: Shells, seen: set[str]) -> set[str]:
    """Kill the sessions of shells that ended at least one sweep ago (tmux kept their panes so
    that waits could read the exit status); returns the ended ones seen now."""
    ended = set(await shells.ended())
    for shell_id in ended & seen:
        with contextlib.suppress(SessionError, Exception):
            await shells.host_of(shell_id).kill(shell_id)
    return ended - seen


async def check_confined(shells: Shells) -> None:
    """Confined shells between runs: what their people left in git directories is neutralised,
    and the sandbox state of shells that ended is released."""
    from tether.shells import lifecycle

    live = await shells.live()
    for shell_id in live:
        if shells.confinement_of(shell_id) is not None:
            await lifecycle.check_confined(shells, shells.host_of(shell_id), shell_id)
    shells.local.confined.sweep(lambda shell_id: shell_id in live)


async def sweep_forever(shells: Shells) -> None:
    seen: set[str] = set()
    while True:
        await asyncio.sleep(SWEEP_S)
        try:
            seen = await sweep_once(shells, seen)
        except Exception:
            logger.exception("idle sweep failed")


async def sweep_once(shells: Shells, seen: set[str], *, now: int | None = None) -> set[str]:
    """One sweep; returns the ended shells seen now (for ``remove_ended`` next time).

    A home without an open shell has nothing to close, and asking its hosts would start a tmux
    server there (the control client creates one) or connect to remote machines: a process that
    never opened a shell, such as the command line's tools process, must not leave one behind.
    Retention still runs there (asking nothing that would start anything): a home whose servers
    no longer open shells sheds its expired ones too."""
    records = shells.records.shells()
    shells.prune(records)
    at = now if now is not None else now_ms()  # a test's clock, or the real one
    if not records:
        await retention.sweep(shells, at, start_nothing=True)
        return set()
    await close_idle(shells, at)
    # Closed shells past [sessions] keep_closed_days (at most once an hour per home).
    await retention.sweep(shells, at)
    seen = await remove_ended(shells, seen)
    await check_confined(shells)
    return seen
