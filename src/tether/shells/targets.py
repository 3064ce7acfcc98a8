"""Which shells a task addresses (``target``), and whether more may be opened (``maxSessions``).

Invariant: a target resolves against what is alive now: ``mine`` is this conversation's live
shells (a write needs exactly one), ``*`` every live shell (never for a write), ids must all be
alive. A named shell on a host that could not be reached is tried once more, and its host's error
(what failed, how to fix it) is the task's error, not "no such shell". ``maxSessions`` counts
live shells on every host before any is opened (the open records of an unreachable host count).
"""

from __future__ import annotations

from collections.abc import Collection

from tether.errors import NotFoundError, RefusedError, UsageError
from tether.shells import retention
from tether.shells.domain import Shells
from tether.shells.requests import Target


async def resolve_target(
    shells: Shells,
    target: Target,
    actor: str,
    *,
    write: bool,
    path: str,
    live: Collection[str] | None = None,
) -> list[str]:
    """The shell ids a target names, checked against what is alive."""
    if live is None:
        live = await shells.live()
    if target.mode == "ids":
        missing = [i for i in target.ids if i not in live]
        if missing:
            live = {*live, *await _beyond_reach(shells, missing)}
            missing = [i for i in target.ids if i not in live]
        if missing:
            raise NotFoundError(f"{path}.sessions: {_why_not_live(shells, missing)}")
        for shell_id in target.ids:
            shells.host_name(shell_id)
        return list(target.ids)
    if target.mode == "*":
        if write:
            raise UsageError(f"{path}.sessions='*' is not allowed for a write; give an id or 'mine'")
        return sorted(live)
    records = shells.records.shells()
    mine = sorted(i for i in live if (rec := records.get(i)) is not None and rec.owner == actor)
    if not mine:
        away = [r.id for r in records.values() if r.owner == actor and r.host in shells.down]
        mine = sorted(await _beyond_reach(shells, away))
        raise NotFoundError(
            f"{path}.sessions='mine': this conversation has no live shell; open one with shell_open "
            "or name a shell id"
        )
    if write and len(mine) > 1:
        raise UsageError(
            f"{path}.sessions='mine' is ambiguous for a write: this conversation owns {len(mine)} shells "
            f"({', '.join(mine)}); give target.sessions=<id>"
        )
    for shell_id in mine:
        shells.host_name(shell_id)
    return mine


def _why_not_live(shells: Shells, missing: list[str]) -> str:
    """What became of shells that are not live, and what to do instead."""
    records = shells.records
    ended = [i for i in missing if records.shell(i) is not None]  # open records, no session
    closed = [i for i in missing if i not in ended and records.any_shell(i) is not None]
    unknown = [i for i in missing if i not in closed and i not in ended]
    parts = []
    if ended:
        parts.append(
            f"shell {', '.join(ended)} no longer runs (its bash ended: exit, set -e and a failing "
            "command, a logout, or its tmux session was killed); open a new one with shell_open"
        )
    if closed:
        parts.append(
            f"shell {', '.join(closed)} was closed; shell_open with action.from=<that id> opens a new "
            "shell in its directory with its scrollback"
        )
    if unknown:
        parts.append(
            f"no live shell {', '.join(unknown)}"
            f"{retention.unknown_note(shells.store, shells.config.sessions.keep_closed_days)}; list "
            "live shells with shell_state scope='*' or open one with shell_open"
        )
    return "; ".join(parts)


async def _beyond_reach(shells: Shells, ids: list[str]) -> set[str]:
    """Those of ``ids`` found live on their (remote) host after trying it once more; the host's
    error when it still cannot be reached."""
    found: set[str] = set()
    for name in sorted({shells.host_name(i) for i in ids} - {"local"}):
        host = shells.hosts.get(name)
        if host is None:
            continue
        await host.connect()  # raises the host's error (within its connect timeout)
        panes = await host.panes()
        shells.down.pop(name, None)
        found |= {i for i in ids if i in panes and not panes[i].dead}
    return found


async def check_capacity(shells: Shells, wanted: int, *, what: str = "shell_open") -> None:
    """``RefusedError`` (``MAX_SESSIONS``) when ``wanted`` more shells would pass ``maxSessions``."""
    live = set(await shells.live(lean=True))  # how many, not where they are
    live |= {r.id for r in shells.records.shells().values() if r.host in shells.down}
    limit = shells.config.sessions.max_sessions
    if len(live) + wanted > limit:
        raise RefusedError(
            f"{what}: {len(live)} shells are open and {wanted} more were asked for, over maxSessions="
            f"{limit}; close shells (shell_manage close) or open fewer",
            code="MAX_SESSIONS",
        )
