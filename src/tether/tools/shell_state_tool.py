"""``shell_state``: one row per shell with its states, owner, label, foreground command and cwd.

Invariant: states are read, never guessed from memory: ``idle``/``busy`` from the terminal
(``procinfo.waiting_at_prompt``: the shell in front, reading a line, nothing typed pending) and
this process's runs still being waited for — not from recent output, since drawing the prompt
itself is output; ``attached`` from tmux's client count;
``user-busy`` from ``sessions.user_busy`` (the same test that refuses agent writes);
``ai-busy`` from calls this process is running on the shell; ``locked``/``unlocked`` from
``SessionHooks.is_locked`` (a manual lock, or another conversation's write holding the shell's
lock now). Filters combine with AND; several ``state`` values are a union.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

from tether.shells import procinfo
from tether.shells.engine import PaneInfo, SessionEngine
from tether.shells.idle import SWEEP_S
from tether.shells.records import ShellRecord
from tether.shells.safety.user_busy import client_activity, is_user_busy
from tether.tools.registry import ToolResult
from tether.tools.shell_args_model import StateQuery

STATE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "shells": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "shell": {"type": "string"},
                    "label": {"type": "string"},
                    "owner": {"enum": ["mine", "others", "panel", "unknown"]},
                    "states": {"type": "array", "items": {"type": "string"}},
                    "fg": {"type": "string"},
                    "cwd": {"type": "string"},
                    "attached": {"type": "integer"},
                    "createdMs": {"type": ["integer", "null"]},
                    "lastActivityMs": {"type": ["integer", "null"]},
                    "git": {"type": ["string", "null"]},
                },
                "required": ["shell", "label", "owner", "states", "fg", "cwd", "attached"],
            },
        },
        "diagnostics": {"type": ["object", "null"]},
    },
    "required": ["shells"],
}


def owner_of(rec: ShellRecord | None, actor: str) -> str:
    if rec is None:
        return "unknown"
    if rec.owner == actor:
        return "mine"
    return "panel" if rec.owner == "panel" else "others"


def states_of(
    engine: SessionEngine, pane: PaneInfo, activity: float, now: float, actor: str
) -> tuple[list[str], str]:
    fg = procinfo.foreground(pane.pid)
    # A run this process typed is busy until its wait is over, even in the instant before the
    # shell took the line (a finished run's wait ends once the shell reads its next line).
    running = any(r.shell_id == pane.shell_id for r in engine.pending_runs.values())
    states = ["idle" if not running and procinfo.waiting_at_prompt(fg, pane.tty) else "busy"]
    if is_user_busy(engine, pane, activity, now):
        states.append("user-busy")
    if engine.ai_busy.get(pane.shell_id):
        states.append("ai-busy")
    states.append("locked" if engine.hooks.is_locked(pane.shell_id, actor) else "unlocked")
    if pane.attached > 0:
        states.append("attached")
    return states, fg.command


async def _git_branch(cwd: str) -> str | None:
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            cwd,
            "rev-parse",
            "--abbrev-ref",
            "HEAD",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 5.0)
    except (OSError, TimeoutError):
        return None
    return out.decode().strip() or None if proc.returncode == 0 else None


async def _diagnostics(engine: SessionEngine, live: int, records: int) -> dict[str, Any]:
    """Server (tmux), host, watchdog (idle sweep) and configuration facts for ``verbose``."""
    try:
        server = (await engine.control.run("display-message", "-p", "#{pid} #{version}"))[0].split(" ")
    except Exception:
        server = ["?", "?"]
    cfg = engine.config.sessions
    return {
        "tmuxServerPid": server[0],
        "tmuxVersion": server[-1],
        "socket": str(engine.socket),
        "home": str(engine.home),
        "host": socket.gethostname(),
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


async def shell_state(engine: SessionEngine, q: StateQuery, actor: str) -> ToolResult:
    live = await engine.live()
    records = engine.records.shells()
    activity = await client_activity(engine)
    now = time.time()
    rows: list[dict[str, Any]] = []
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
        states, fg = states_of(engine, pane, activity.get(shell_id, 0.0), now, actor)
        if q.fg is not None and q.fg not in fg:
            continue
        if q.states and not set(q.states) & set(states):
            continue
        rows.append(
            {
                "shell": shell_id,
                "label": label,
                "owner": owner,
                "states": states,
                "fg": fg,
                "cwd": pane.cwd,
                "attached": pane.attached,
                "createdMs": rec.created_ms if rec else None,
                "lastActivityMs": rec.last_activity_ms if rec else None,
                "git": None,
            }
        )
    if q.with_git:
        branches = await asyncio.gather(*(_git_branch(r["cwd"]) for r in rows))
        for row, branch in zip(rows, branches, strict=True):
            row["git"] = branch
    lines = [f"{len(rows)} shell{'s' if len(rows) != 1 else ''} (scope {q.scope})"]
    for r in rows:
        joined = ",".join(r["states"])
        text = f"{r['shell']} · {r['label']} · {r['owner']} · {joined} · fg={r['fg']} · cwd={r['cwd']}"
        if q.with_git:
            text += f" · git={r['git'] or '-'}"
        lines.append(text)
    diagnostics: dict[str, Any] | None = None
    if q.verbose:
        diagnostics = await _diagnostics(engine, len(live), len(records))
        lines.append("diagnostics: " + " · ".join(f"{k}={v}" for k, v in diagnostics.items()))
    return ToolResult(text="\n".join(lines), structured={"shells": rows, "diagnostics": diagnostics})
