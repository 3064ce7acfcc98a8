"""``shell_state``: the rows of ``shells.state`` as text and ``structuredContent``.

Invariant: translation only — the states and filters are the shells layer's (``shells.state``).
Each row also names who opened the shell (``openedBy``: a conversation id, ``panel``, ``cli``) with
the client that conversation said it was (``client``), a person's manual lock (``manualLock``),
and how the shell is confined (``sandbox``, from its record),
so a front door needs nothing else to show the list. A host that could not be reached is named
right after the count, with why and the shells recorded there that the query covers (and a shell
named by id on it is reported out of reach, never absent): its shells are not in the rows.
"""

from __future__ import annotations

from typing import Any

from tether.shells import HostDown, ShellRow, Shells, StateQuery, shell_state_rows
from tether.store.manual_locks import ManualLock, ManualLocks
from tether.tools.conversations import client_names
from tether.tools.registry import ToolResult

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
                    "host": {"type": "string"},
                    "states": {"type": "array", "items": {"type": "string"}},
                    "fg": {"type": "string"},
                    "cwd": {"type": "string"},
                    "attached": {"type": "integer"},
                    "createdMs": {"type": ["integer", "null"]},
                    "lastActivityMs": {"type": ["integer", "null"]},
                    "git": {"type": ["string", "null"]},
                    "openedBy": {
                        "type": ["string", "null"],
                        "description": "Who opened the shell: a conversation id, panel or cli.",
                    },
                    "client": {
                        "type": ["string", "null"],
                        "description": "The MCP client of that conversation, as it named itself.",
                    },
                    "manualLock": {
                        "type": ["object", "null"],
                        "description": "A person's lock (panel or tether shell lock): agents are refused.",
                        "properties": {
                            "who": {"type": "string"},
                            "sinceMs": {"type": "integer"},
                            "reason": {"type": "string"},
                        },
                    },
                    "sandbox": {
                        "type": ["string", "null"],
                        "description": "How the shell is confined, fixed when it opened: the mode, "
                        "where it may write and whether it has the network (e.g. 'use_default: "
                        "writable /srv/app; network off'), or 'unconfined (…)'. null: this "
                        "deployment does not confine and the shell runs as the user.",
                    },
                    "lastCommand": {
                        "type": ["object", "null"],
                        "description": "The latest command line the shell ran (by an agent, a person or "
                        "shell_send): its text, exit code (null while it runs) and who typed it.",
                        "properties": {
                            "text": {"type": "string"},
                            "exitCode": {"type": ["integer", "null"]},
                            "by": {"type": "string"},
                        },
                    },
                },
                "required": ["shell", "label", "owner", "states", "fg", "cwd", "attached"],
            },
        },
        "unreachable": {
            "type": "array",
            "description": "Hosts the query covers that could not be reached: their shells are not "
            "in shells (out of reach, not gone).",
            "items": {
                "type": "object",
                "properties": {
                    "host": {"type": "string"},
                    "error": {"type": "string", "description": "Why (HOST_UNREACHABLE's message)."},
                    "shells": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Shells recorded on that host that the query names or covers.",
                    },
                },
                "required": ["host", "error", "shells"],
            },
        },
        "diagnostics": {"type": ["object", "null"]},
    },
    "required": ["shells"],
}


def _row(
    r: ShellRow, opened_by: str | None, clients: dict[str, str], lock: ManualLock | None
) -> dict[str, Any]:
    return {
        "shell": r.shell,
        "label": r.label,
        "owner": r.owner,
        "host": r.host,
        "states": list(r.states),
        "fg": r.fg,
        "cwd": r.cwd,
        "attached": r.attached,
        "createdMs": r.created_ms,
        "lastActivityMs": r.last_activity_ms,
        "git": r.git,
        "openedBy": opened_by,
        "client": clients.get(opened_by) if opened_by else None,
        "sandbox": r.sandbox,
        "manualLock": None
        if lock is None
        else {"who": lock.who, "sinceMs": lock.since_ms, "reason": lock.why},
        "lastCommand": None
        if r.last_command is None
        else {"text": r.last_command.text, "exitCode": r.last_command.status, "by": r.last_command.by},
    }


async def shell_state(shells: Shells, q: StateQuery, actor: str) -> ToolResult:
    rows, diagnostics, down = await shell_state_rows(shells, q, actor)
    head = f"{len(rows)} shell{'s' if len(rows) != 1 else ''} (scope {q.scope})"
    if down:
        names = ", ".join(d.host for d in down)
        head += f"; not listed: the shells of unreachable host{'s' if len(down) != 1 else ''} {names}"
    lines = [head, *(_down_line(d, named=bool(q.sessions)) for d in down)]
    for r in rows:
        text = f"{r.shell} · {r.label} · {r.owner} · {','.join(r.states)} · fg={r.fg} · cwd={r.cwd}"
        if r.last_command is not None:
            last = r.last_command
            shown = last.text if len(last.text) <= 60 else last.text[:57] + "..."
            code = "running" if last.status is None else f"exit={last.status}"
            text += f" · last=`{shown}` {code} by {last.by}"
        if r.host != "local":
            text += f" · host={r.host}"
        if r.sandbox is not None:
            text += f" · sandbox={r.sandbox}"
        if q.with_git:
            text += f" · git={r.git or '-'}"
        lines.append(text)
    if diagnostics is not None:
        lines.append("diagnostics: " + " · ".join(f"{k}={v}" for k, v in diagnostics.items()))
    records = shells.records.shells()
    clients = client_names(shells.store, (rec.owner for rec in records.values()))
    locks = ManualLocks(shells.store).all()
    structured = [
        _row(r, records[r.shell].owner if r.shell in records else None, clients, locks.get(r.shell))
        for r in rows
    ]
    unreachable = [{"host": d.host, "error": d.error, "shells": list(d.shells)} for d in down]
    return ToolResult(
        text="\n".join(lines),
        structured={"shells": structured, "unreachable": unreachable, "diagnostics": diagnostics},
    )


def _down_line(d: HostDown, *, named: bool) -> str:
    """``host build unreachable: …``: the shells named (or recorded) there are out of reach, not gone."""
    if named:
        ids = ", ".join(d.shells)
        what = f"{ids} {'is' if len(d.shells) == 1 else 'are'} on it: out of reach, not known to be gone"
    elif d.shells:
        what = f"recorded there (out of reach, not gone): {', '.join(d.shells)}"
    else:
        what = "no shell of this scope is recorded there"
    return f"host {d.host} unreachable ({what}): {d.error}"
