"""``state``: one row per shell with its states, owner, label, host, foreground command and cwd.

Invariant: states are read, never guessed from memory: ``idle``/``busy`` from the shell's own last
event (at its prompt, reading a line, nothing typed pending) and this process's runs still being
waited for — not from recent output, since drawing the prompt itself is output; ``attached`` from
tmux's client count; ``user-busy`` from ``safety.user_busy`` (the same test that refuses agent
writes); ``ai-busy`` from calls this process is running on the shell; ``locked``/``unlocked`` from
``SessionHooks.is_locked`` (a manual lock, or another conversation's write holding the shell's
lock now). Filters combine with AND; several ``state`` values are a union.

A host that cannot be reached lists nothing, so its absence from the rows is never silent: every
unreachable host the query covers is returned with why, and the shells recorded there that the
query names or covers (``HostDown``) — out of reach, not gone.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from tether.errors import UsageError
from tether.shells.domain import Shells
from tether.shells.host import ShellHost
from tether.shells.idle import SWEEP_S
from tether.shells.records import ShellRecord
from tether.shells.requests import StateQuery
from tether.shells.safety.user_busy import client_activity, is_user_busy
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo
from tether.shells.views import LastCommand, last_command


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellRow:
    shell: str
    label: str
    owner: str
    host: str
    states: tuple[str, ...]
    fg: str
    cwd: str
    attached: int
    created_ms: int | None
    last_activity_ms: int | None
    last_command: LastCommand | None = None
    git: str | None = None
    # How the shell is confined, as its record says (``sandbox_of``); None: nothing to say.
    sandbox: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HostDown:
    """A host the query covers that could not be reached: why, and the shells recorded there that
    the query names or covers (they are not in the rows, and not known to be gone)."""

    host: str
    error: str
    shells: tuple[str, ...]


def sandbox_of(shells: Shells, host: ShellHost, shell_id: str, rec: ShellRecord | None) -> str | None:
    """What the shell may write and reach, from its record — the confinement it started with, for
    its whole life (``cd`` elsewhere widens nothing): ``None`` only where the deployment does not
    confine and the shell was opened unconfined, so an agent never takes a shell for confined."""
    if rec is None:
        return "unknown (no record of how this shell started)" if shells.confines else None
    try:
        confinement = shells.confinement_of(shell_id)
    except UsageError as exc:
        return f"unknown ({exc.message})"
    if confinement is None:
        return "unconfined (opened by a tether process that did not confine)" if shells.confines else None
    if not confinement.sandboxed:
        return confinement.summary()
    return host.sandbox_summary(shell_id, rec.cwd, confinement) or confinement.summary()


def owner_of(rec: ShellRecord | None, actor: str) -> str:
    if rec is None:
        return "unknown"
    if rec.owner == actor:
        return "mine"
    return "panel" if rec.owner == "panel" else "others"


async def is_idle(shells: Shells, host: ShellHost, pane: PaneInfo) -> bool:
    """At its prompt: the shell's last own event is a prompt, no run of ours is in flight, and the
    terminal (where the host can tell) reads a line with nothing typed pending."""
    if any(r.shell_id == pane.shell_id for r in shells.pending.values()):
        return False
    activity = shells.activity(pane.shell_id)
    reading = await host.reading_line(pane)
    if activity is None:
        return reading is True
    return activity.phase == "prompt" and reading is not False


async def states_of(
    shells: Shells, host: ShellHost, pane: PaneInfo, activity: float, now: float, actor: str
) -> tuple[list[str], str]:
    fg = await host.foreground(pane)
    states = ["idle" if await is_idle(shells, host, pane) else "busy"]
    if is_user_busy(shells.config, pane, activity, now):
        states.append("user-busy")
    if shells.ai_busy.get(pane.shell_id):
        states.append("ai-busy")
    states.append("locked" if shells.hooks.is_locked(pane.shell_id, actor) else "unlocked")
    if pane.attached > 0:
        states.append("attached")
    return states, fg.command


async def diagnostics(shells: Shells, live: int, records: int) -> dict[str, Any]:
    """Server (tmux), host, watchdog (idle sweep) and configuration facts for ``verbose``."""
    host = shells.local
    try:
        server = (await host.control.run(*commands.server_facts()))[0].split(" ")
    except Exception:
        server = ["?", "?"]
    cfg = shells.config.sessions
    return {
        "tmuxServerPid": server[0],
        "tmuxVersion": server[-1],
        "socket": str(host.socket),
        "home": str(shells.home),
        "host": socket.gethostname(),
        "hosts": sorted(shells.hosts),
        "hostsDown": {name: exc.message for name, exc in sorted(shells.down.items())},
        "pid": os.getpid(),
        "liveShells": live,
        "records": records,
        "idleSweepSeconds": SWEEP_S,
        "idleClose": cfg.idle_close,
        "idleCloseMinutes": cfg.idle_close_minutes,
        "maxSessions": cfg.max_sessions,
        "logMaxBytes": cfg.log_max_bytes,
        "userBusySeconds": cfg.user_busy_seconds,
    }


async def state(
    shells: Shells, q: StateQuery, actor: str
) -> tuple[list[ShellRow], dict[str, Any] | None, list[HostDown]]:
    """The rows the query selects, the diagnostics when ``verbose``, and the hosts the query
    covers that could not be reached (their shells are not in the rows)."""
    if q.host is not None:
        shells.check_host(q.host, "host")
    records = shells.records.shells()
    # Of the shells the query can select alone, when it names them or asks for this
    # conversation's: the other shells of the home are not asked about (nor their /proc read).
    only: list[str] | None = None
    if q.sessions:
        only = list(q.sessions)
    elif q.scope == "mine":
        only = [r.id for r in records.values() if r.owner == actor]
    live = await shells.live(only=only)
    activity: dict[str, float] = {}
    for host in shells.hosts.values():
        if host.name not in shells.down:
            activity.update(await client_activity(host))
    now = time.time()
    rows: list[ShellRow] = []
    for shell_id in sorted(live):
        pane = live[shell_id]
        rec = records.get(shell_id)
        owner = owner_of(rec, actor)
        if q.scope == "mine" and owner != "mine" and not q.sessions:
            continue
        if q.sessions and shell_id not in q.sessions:
            continue
        if q.owner is not None and owner != q.owner:
            continue
        label = rec.label if rec is not None else shell_id
        if q.label is not None and q.label not in label:
            continue
        if q.cwd is not None and q.cwd not in pane.cwd:
            continue
        host = shells.host_of(shell_id)
        if q.host is not None and host.name != q.host:
            continue
        states, fg = await states_of(shells, host, pane, activity.get(shell_id, 0.0), now, actor)
        if q.fg is not None and q.fg not in fg:
            continue
        if q.states and not set(q.states) & set(states):
            continue
        rows.append(
            ShellRow(
                shell=shell_id,
                label=label,
                owner=owner,
                host=host.name,
                states=tuple(states),
                fg=fg,
                cwd=pane.cwd,
                attached=pane.attached,
                created_ms=rec.created_ms if rec else None,
                last_activity_ms=rec.last_activity_ms if rec else None,
                last_command=last_command(shells, shell_id),
                sandbox=sandbox_of(shells, host, shell_id, rec),
            )
        )
    if q.with_git:
        branches = await asyncio.gather(*(shells.hosts[r.host].git_branch(r.cwd) for r in rows))
        rows = [_with_git(r, b) for r, b in zip(rows, branches, strict=True)]
    diag = await diagnostics(shells, len(live), len(records)) if q.verbose else None
    return rows, diag, hosts_down(shells, q, actor)


def hosts_down(shells: Shells, q: StateQuery, actor: str) -> list[HostDown]:
    """The unreachable hosts the query covers: those of its named shells, else its ``host``, else
    every one; with the recorded shells there it names (or, without names, its scope covers)."""
    if not shells.down:
        return []
    records = shells.records.shells()
    if q.sessions:
        named = {s: shells.host_name(s) for s in q.sessions}
        wanted = {h for h in named.values() if h in shells.down}
    else:
        wanted = set(shells.down) if q.host is None else {q.host} & set(shells.down)
    found = []
    for name in sorted(wanted):
        if q.sessions:
            there = [s for s in q.sessions if named[s] == name]
        else:
            there = [
                r.id
                for r in records.values()
                if r.host == name and (q.scope == "*" or owner_of(r, actor) == "mine")
            ]
        found.append(HostDown(host=name, error=shells.down[name].message, shells=tuple(sorted(there))))
    return found


def _with_git(row: ShellRow, branch: str | None) -> ShellRow:
    from dataclasses import replace

    return replace(row, git=branch)
