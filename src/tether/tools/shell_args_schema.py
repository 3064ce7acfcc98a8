"""JSON Schemas (draft 2020-12) of the seven persistent-shell tools' input, for MCP ``inputSchema``.

Invariant: the schemas describe exactly what ``shell_args`` accepts — same fields, kinds, enums,
ranges and defaults, English descriptions taken from spec 003 — so a client that follows them is
never refused for shape. They are documentation for the model; the validator stays the authority
(cross-field rules such as "bypassGuard needs a reason" are only described, not encoded).
``input_schema`` returns a fresh copy each time, so callers may edit it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Schema = dict[str, Any]
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _int(lo: int, hi: int | None, desc: str, default: int | None = None) -> Schema:
    schema: Schema = {"type": "integer", "minimum": lo, "description": desc}
    if hi is not None:
        schema["maximum"] = hi
    if default is not None:
        schema["default"] = default
    return schema


def _str(desc: str, max_len: int | None = None) -> Schema:
    schema: Schema = {"type": "string", "description": desc}
    if max_len is not None:
        schema["maxLength"] = max_len
    return schema


def _bool(default: bool, desc: str) -> Schema:
    return {"type": "boolean", "default": default, "description": desc}


def _enum(values: Sequence[str], desc: str, default: str | None = None) -> Schema:
    schema: Schema = {"type": "string", "enum": list(values), "description": desc}
    if default is not None:
        schema["default"] = default
    return schema


def _obj(props: Mapping[str, Schema], desc: str = "", required: Sequence[str] = ()) -> Schema:
    schema: Schema = {"type": "object", "properties": dict(props), "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    if desc:
        schema["description"] = desc
    return schema


def _kind(kind: str, props: Mapping[str, Schema], desc: str, required: Sequence[str] = ()) -> Schema:
    return _obj({"kind": {"const": kind}, **props}, desc, ("kind", *required))


_KEYS = {"type": "array", "items": {"type": "string"}, "maxItems": 64}
_TIMEOUT = _int(
    0,
    86_400_000,
    "How long to wait at most, in ms (max 24 h); a timeout is reported, "
    "nothing is killed. Give it explicitly for commands over two minutes.",
    30_000,
)
_POLL = _int(20, 100_000, "Polling interval in ms.", 150)
_PATTERN = _str(
    "kind=match: JavaScript regex (case-sensitive) matched against output that appears after the wait starts."
)

_ACTIONS: Mapping[str, Sequence[Schema]] = {
    "shell_open": [
        _kind(
            "open",
            {
                "count": _int(
                    1,
                    64,
                    "How many shells to create (the whole batch is refused if existing + count "
                    "exceeds maxSessions).",
                    1,
                ),
                "cwd": _str(
                    "Starting directory; omitted = deployment default (the conversation's directory "
                    "when known)."
                ),
                "label": _str("Base name of the shell(s), also the panel's display name.", 32),
                "cols": _int(20, 1000, "Initial columns.", 120),
                "rows": _int(5, 500, "Initial rows.", 32),
                "idleMinutes": _int(
                    0,
                    1440,
                    "Close automatically after this many idle minutes; 0 = never; "
                    "omitted = follow the global setting.",
                ),
                "watch": _bool(False, "Subscribe to new output right away (not for TUI programs)."),
                "from": _str("Revive from the latest snapshot of this old shell id (dsh-…)."),
            },
            "Create shells.",
        ),
    ],
    "shell_run": [
        _kind(
            "run",
            {"command": _str("The command to run (wrapped to report its exit code).")},
            "Run one command.",
            ("command",),
        ),
        _kind(
            "steps",
            {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 50,
                    "description": "Short interactive sequence; each step sends a line (Enter is pressed) "
                    "and/or waits. No exit-code marker is injected.",
                    "items": _obj(
                        {
                            "label": _str("Step name.", 64),
                            "send": _str("One line of text; Enter is pressed after it."),
                            "expect": {
                                "description": "What to wait for after send: idle, bell, match (pattern) or "
                                'file (path); a bare "idle"/"bell" string is accepted.',
                                "anyOf": [
                                    {"type": "string", "enum": ["idle", "bell"]},
                                    _obj(
                                        {
                                            "kind": _enum(["idle", "match", "file", "bell"], "Condition."),
                                            "pattern": _PATTERN,
                                            "path": _str("kind=file: file path (~ allowed)."),
                                        },
                                        required=("kind",),
                                    ),
                                ],
                            },
                            "timeoutMs": _int(
                                0, 86_400_000, "Step timeout in ms (default: the task's wait.timeoutMs)."
                            ),
                        }
                    ),
                }
            },
            "Run a sequence of steps.",
            ("steps",),
        ),
        _kind(
            "retry",
            {
                "mode": _enum(
                    ["last", "last-failed"],
                    "last = rerun the shell's latest command; last-failed = rerun it only if it failed.",
                )
            },
            "Rerun the latest command.",
            ("mode",),
        ),
    ],
    "shell_send": [
        _kind(
            "send",
            {
                "text": _str(
                    'Text to type, without newlines (submit with keys: ["Enter"]); "" to send only keys.'
                ),
                "keys": {
                    **_KEYS,
                    "description": 'tmux key names pressed after text, e.g. ["Enter"], ["C-c"], ["Tab"].',
                },
                "preKeys": {
                    **_KEYS,
                    "description": 'tmux key names pressed before text, e.g. ["C-c"] to clear.',
                },
            },
            "Type text and keys into the shell.",
            ("text",),
        ),
    ],
    "shell_read": [
        _kind(
            "read",
            {
                "search": _str("JavaScript regex searched in the buffer (case-sensitive); mode is ignored."),
                "context": _int(0, 8, "Lines of context around each match.", 0),
                "matchOffset": _int(
                    0, 100_000, "Skip this many matches (paging: use the returned matchOffset=K).", 0
                ),
                "mode": _enum(
                    ["tail", "screen", "history", "since", "diff", "summary"],
                    "tail = end of buffer, screen = visible screen, history = history buffer, "
                    "since = new since the last read, diff = change since the last read, "
                    "summary = last lines plus total count.",
                    "tail",
                ),
                "ifChanged": _bool(False, "Return content only if the screen changed (else 'unchanged')."),
            },
            "Read output.",
        ),
        _kind("subscribe", {}, "Receive new output as notifications."),
        _kind("unsubscribe", {}, "Stop notifications."),
    ],
    "shell_manage": [
        _kind("rename", {"newName": _str("New display name.", 32)}, "Rename.", ("newName",)),
        _kind(
            "resize",
            {
                "cols": _int(20, 1000, "New columns (omitted = keep)."),
                "rows": _int(5, 500, "New rows (omitted = keep)."),
            },
            "Resize (give cols and/or rows).",
        ),
        _kind("respawn", {}, "Restart the shell process."),
        _kind("close", {}, "Close (a snapshot is kept)."),
        _kind("reap", {}, "Remove lost records idle for 10 minutes or more."),
        _kind(
            "idle",
            {"idleMinutes": _int(0, 1440, "Auto-close after this many idle minutes; 0 = never.", 0)},
            "Set auto-close.",
        ),
        _kind("snapshot", {}, "Take a snapshot."),
        _kind("snapshot-list", {}, "List snapshots."),
        _kind("doctor", {"note": _str("Note written to the audit log.")}, "Self-check."),
        _kind(
            "macro-set",
            {
                "name": _str("Macro name (invoked as /NAME).", 64),
                "text": _str("Macro text (a command fragment)."),
                "scope": _enum(["global", "conversation", "shell"], "Visibility.", "conversation"),
                "submit": _bool(True, "Press Enter after expanding."),
                "note": _str("Note written to the audit log."),
            },
            "Define a macro.",
            ("name", "text"),
        ),
        _kind("macro-rm", {"name": _str("Macro name.", 64)}, "Delete a macro.", ("name",)),
        _kind("macro-list", {}, "List macros."),
        _kind("vault-list", {}, "List vault names and lock state (never values)."),
        _kind(
            "macro-history",
            {"name": _str("Macro name.", 64), "days": _int(1, 3650, "Days back.", 7)},
            "History of a macro.",
            ("name",),
        ),
        _kind(
            "macro-restore",
            {
                "name": _str("Macro name.", 64),
                "at": _int(0, None, "Epoch ms of the version (from macro-history)."),
            },
            "Restore a macro version.",
            ("name", "at"),
        ),
        _kind("workspace-save", {"name": _str("Workspace name.", 64)}, "Save a workspace.", ("name",)),
        _kind("workspace-list", {}, "List workspaces."),
        _kind(
            "workspace-restore",
            {"name": _str("Workspace name.", 64)},
            "Restore a workspace (opens new shells).",
            ("name",),
        ),
        _kind("workspace-delete", {"name": _str("Workspace name.", 64)}, "Delete a workspace.", ("name",)),
    ],
    "shell_audit": [
        _kind(
            "audit",
            {
                "actor": _str("Filter by actor (conversation id, panel, cli)."),
                "source": _enum(["tool", "panel", "host", "cli"], "Filter by source."),
                "days": _int(1, 3650, "Days back.", 1),
                "export": _bool(False, "Return raw JSONL records (at most output.lines)."),
            },
            "Read the audit log.",
        ),
    ],
}

_TARGET = _obj(
    {
        "sessions": _str(
            "mine (default) = shells this conversation created (a single one when there is one); * = every "
            "live shell (reads only; writes are refused); or comma-separated ids like dsh-ab12cd,dsh-cd34ef."
        )
    },
    "Which shells. One shell may appear in only one task per call.",
)

_WAIT_KINDS = {
    "shell_run": ["none", "idle", "bell", "match", "exit", "file", "noproc", "cpu"],
    "shell_read": ["idle", "bell", "match", "exit", "foreground"],
}
_KIND_DESC = (
    "none = return at once (async start); idle = back at the prompt; bell = BEL rung; match = "
    "new output matches pattern; exit = command finished (optionally with code); file = path "
    "exists; noproc = proc left the pane's process tree; cpu = foreground CPU below threshold; "
    "foreground = foreground process becomes proc."
)


def _wait(tool: str) -> Schema:
    if tool == "shell_send":
        return _obj(
            {"pollMs": _int(20, 100_000, "Interval for checking that the screen settled, in ms.", 150)},
            "shell_send takes only pollMs.",
        )
    props: dict[str, Schema] = {"kind": _enum(_WAIT_KINDS[tool], _KIND_DESC, "idle"), "timeoutMs": _TIMEOUT}
    if tool == "shell_run":
        props["pollMs"] = _POLL
    props["pattern"] = _PATTERN
    props["code"] = _int(0, 255, "kind=exit: expected exit code; a different one is reported at once.")
    if tool == "shell_read":
        props["runId"] = _str("kind=exit: the run=<id> of a shell_run (default: the shell's latest run).")
    else:
        props["path"] = _str("kind=file: file path (~ allowed).")
        props["threshold"] = {
            "type": "number",
            "minimum": 0,
            "maximum": 100,
            "description": "kind=cpu: CPU percentage.",
        }
    props["proc"] = _str(
        "kind=noproc: process name that must disappear."
        if tool == "shell_run"
        else "kind=foreground: process name to become the foreground."
    )
    desc = "What to wait for. Each parameter is accepted only with its kind."
    if tool == "shell_read":
        desc += " Omit the block to read at once."
    return _obj(props, desc)


def _output(tool: str) -> Schema:
    props: dict[str, Schema] = {
        "lines": _int(
            0,
            2000,
            "Lines to return (tail keeps the last N; since keeps "
            "up to 2000 and states how many were dropped).",
            20,
        )
    }
    if tool == "shell_run":
        props["showing"] = _enum(
            ["since", "tail", "screen", "diff", "summary"],
            "since = output new in this call; tail = end of buffer incl. old screen; "
            "screen = visible screen; diff = change since the last read; "
            "summary = last lines plus total count.",
            "since",
        )
        props["structured"] = _bool(
            True, "true = summary header plus one block per task; false = plain text."
        )
    return _obj(props, "Output shape.")


def _safety(tool: str) -> Schema:
    if tool == "shell_manage":
        return _obj(
            {"dryrun": _bool(False, "Only report what close/reap/macro-rm/workspace-delete would do.")},
            "shell_manage takes only dryrun.",
        )
    return _obj(
        {
            "bypassGuard": _bool(
                False, "Skip the dangerous-command guard; only when the user asked; needs reason."
            ),
            "dryrun": _bool(False, "Only report what would be sent; do nothing."),
            "lock": _enum(
                ["require", "ignore"],
                "require = writes to one shell are serialised; ignore = do not wait for the lock.",
                "require",
            ),
            "reason": _str("Reason recorded in the audit log (required with bypassGuard)."),
            "force": _bool(False, "Proceed when a vault group is locked (its references are still refused)."),
        },
        "Safety options.",
    )


_BLOCKS = {
    "shell_run": ("target", "action", "wait", "output", "safety"),
    "shell_send": ("target", "action", "wait", "output", "safety"),
    "shell_read": ("target", "action", "wait", "output"),
    "shell_audit": ("target", "action", "output"),
    "shell_manage": ("target", "action", "safety"),
    "shell_open": ("action",),
}


def _tasks_schema(tool: str) -> Schema:
    blocks: dict[str, Schema] = {}
    for block in _BLOCKS[tool]:
        if block == "target":
            blocks["target"] = _TARGET
        elif block == "action":
            blocks["action"] = {
                "description": "The one operation of this task, named by kind.",
                "oneOf": list(_ACTIONS[tool]),
            }
        elif block == "wait":
            blocks["wait"] = _wait(tool)
        elif block == "output":
            blocks["output"] = _output(tool)
        else:
            blocks["safety"] = _safety(tool)
    blocks["label"] = _str("Name of this task's block in the result.", 64)
    task = _obj(blocks, required=("action",))
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": 16,
                "items": task,
                "description": "1-16 tasks, run in parallel; a shell may appear in only one task.",
            },
            "concurrency": _int(1, None, "Maximum parallel tasks, 1-8 (larger values are clamped to 8).", 4),
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }


_STATE: Schema = {
    "$schema": DIALECT,
    **_obj(
        {
            "scope": _enum(
                ["mine", "*"], "mine = shells of this conversation; * = every live shell.", "mine"
            ),
            "sessions": _str("Filter by shell id (comma-separated)."),
            "label": _str("Filter by display-name substring."),
            "fg": _str("Filter by foreground-command substring."),
            "cwd": _str("Filter by working-directory substring."),
            "state": _str(
                "Filter by state, comma-separated (union): idle, busy, user-busy, ai-busy, locked, "
                "unlocked, attached."
            ),
            "owner": _enum(["mine", "others", "panel", "unknown"], "Filter by creator."),
            "withGit": _bool(False, "Add the git branch (one git call per row)."),
            "verbose": _bool(False, "Add a diagnostic tail (server, host, watchdog, config)."),
        }
    ),
}

SCHEMAS: Mapping[str, Schema] = {**{tool: _tasks_schema(tool) for tool in _BLOCKS}, "shell_state": _STATE}


def input_schema(tool: str) -> Schema:
    """The input JSON Schema of ``tool`` (any of the seven); ``KeyError`` for another name."""
    return copy.deepcopy(SCHEMAS[tool])
