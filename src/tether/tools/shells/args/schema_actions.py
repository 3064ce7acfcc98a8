"""Building blocks of the shell tools' JSON Schemas, and the schema of every ``action.kind``.

Invariant: one schema per kind, in the order of ``actions.KINDS``, with exactly the
fields, ranges and defaults that parser accepts (a test compares the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Schema = dict[str, Any]
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def s_int(lo: int, hi: int | None, desc: str, default: int | None = None) -> Schema:
    schema: Schema = {"type": "integer", "minimum": lo, "description": desc}
    if hi is not None:
        schema["maximum"] = hi
    if default is not None:
        schema["default"] = default
    return schema


def s_budget(lo: int, hi: int, desc: str, default: int | None = None, *, floor: int | None = None) -> Schema:
    """A clamped number: no ``maximum`` (a validating client must not refuse what is clamped)."""
    least = lo if floor is None else floor
    below = f", below {lo} to {lo}" if least < lo else ""
    return s_int(least, None, f"{desc} At most {hi}: a larger value is clamped to {hi}{below}.", default)


def s_str(desc: str, max_len: int | None = None) -> Schema:
    schema: Schema = {"type": "string", "description": desc}
    if max_len is not None:
        schema["maxLength"] = max_len
    return schema


def s_bool(default: bool, desc: str) -> Schema:
    return {"type": "boolean", "default": default, "description": desc}


def s_enum(values: Sequence[str], desc: str, default: str | None = None) -> Schema:
    schema: Schema = {"type": "string", "enum": list(values), "description": desc}
    if default is not None:
        schema["default"] = default
    return schema


def s_obj(props: Mapping[str, Schema], desc: str = "", required: Sequence[str] = ()) -> Schema:
    schema: Schema = {"type": "object", "properties": dict(props), "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    if desc:
        schema["description"] = desc
    return schema


def s_kind(kind: str, props: Mapping[str, Schema], desc: str, required: Sequence[str] = ()) -> Schema:
    return s_obj({"kind": {"const": kind}, **props}, desc, ("kind", *required))


KEYS = {"type": "array", "items": {"type": "string"}, "maxItems": 64}
TIMEOUT = s_budget(
    0,
    86_400_000,
    "How long to wait at most, in ms (24 h at most); a timeout is reported, "
    "nothing is killed. Give it explicitly for commands over two minutes.",
    30_000,
)
POLL = s_budget(20, 100_000, "Polling interval in ms.", 150, floor=0)
PATTERN = s_str(
    "kind=match: JavaScript regex (case-sensitive) matched against output that appears after the wait starts."
)

ACTION_SCHEMAS: Mapping[str, Sequence[Schema]] = {
    "shell_open": [
        s_kind(
            "open",
            {
                "count": s_int(
                    1,
                    64,
                    "How many shells to create (the whole batch is refused if existing + count "
                    "exceeds maxSessions).",
                    1,
                ),
                "cwd": s_str(
                    "Starting directory; omitted = deployment default (the conversation's directory "
                    "when known)."
                ),
                "label": s_str("Base name of the shell(s), also the panel's display name.", 32),
                "cols": s_int(20, 1000, "Initial columns (with from: default the snapshot's).", 120),
                "rows": s_int(5, 500, "Initial rows (with from: default the snapshot's).", 32),
                "idleMinutes": s_int(
                    0,
                    1440,
                    "Close automatically after this many idle minutes; 0 = never; "
                    "omitted = follow the global setting.",
                ),
                "watch": s_bool(False, "Subscribe to new output right away (not for TUI programs)."),
                "from": s_str("Revive from the latest snapshot of this old shell id (dsh-…)."),
                "host": s_str(
                    "Where the shell runs: 'local' (this machine, the default) or a host configured in "
                    "config.toml as [hosts.NAME] (reached with OpenSSH; tmux there keeps the shell). "
                    "With from: default is the old shell's host.",
                    32,
                ),
            },
            "Create shells.",
        ),
    ],
    "shell_run": [
        s_kind(
            "run",
            {"command": s_str("The command to run (wrapped to report its exit code).")},
            "Run one command.",
            ("command",),
        ),
        s_kind(
            "steps",
            {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 50,
                    "description": "Short interactive sequence; each step sends a line (Enter is pressed) "
                    "and/or waits. No exit-code marker is injected.",
                    "items": s_obj(
                        {
                            "label": s_str("Step name.", 64),
                            "send": s_str("One line of text; Enter is pressed after it."),
                            "expect": {
                                "description": "What to wait for after send: idle, bell, match (pattern) or "
                                'file (path); a bare "idle"/"bell" string is accepted.',
                                "anyOf": [
                                    {"type": "string", "enum": ["idle", "bell"]},
                                    s_obj(
                                        {
                                            "kind": s_enum(["idle", "match", "file", "bell"], "Condition."),
                                            "pattern": PATTERN,
                                            "path": s_str("kind=file: file path (~ allowed)."),
                                        },
                                        required=("kind",),
                                    ),
                                ],
                            },
                            "timeoutMs": s_budget(
                                0, 86_400_000, "Step timeout in ms (default: the task's wait.timeoutMs)."
                            ),
                        }
                    ),
                }
            },
            "Run a sequence of steps.",
            ("steps",),
        ),
        s_kind(
            "retry",
            {
                "mode": s_enum(
                    ["last", "last-failed"],
                    "last = rerun the shell's latest command; last-failed = rerun it only if it failed.",
                )
            },
            "Rerun the latest command.",
            ("mode",),
        ),
    ],
    "shell_send": [
        s_kind(
            "send",
            {
                "text": s_str(
                    'Text to type, without newlines (submit with keys: ["Enter"]); "" to send only keys.'
                ),
                "keys": {
                    **KEYS,
                    "description": 'tmux key names pressed after text, e.g. ["Enter"], ["C-c"], ["Tab"].',
                },
                "preKeys": {
                    **KEYS,
                    "description": 'tmux key names pressed before text, e.g. ["C-c"] to clear.',
                },
            },
            "Type text and keys into the shell.",
            ("text",),
        ),
    ],
    "shell_read": [
        s_kind(
            "read",
            {
                "search": s_str("JavaScript regex searched in the buffer (case-sensitive); mode is ignored."),
                "context": s_budget(0, 8, "Lines of context around each match.", 0),
                "matchOffset": s_int(
                    0, 100_000, "Skip this many matches (paging: use the returned matchOffset=K).", 0
                ),
                "mode": s_enum(
                    ["tail", "screen", "history", "since", "diff", "summary"],
                    "tail = end of buffer, screen = visible screen, history = the full log, "
                    "output.lines lines at a time, paged back with before, "
                    "since = new since the last read, diff = change since the last read, "
                    "summary = last lines plus total count.",
                    "tail",
                ),
                "ifChanged": s_bool(False, "Return content only if the screen changed (else 'unchanged')."),
                "before": s_int(
                    0,
                    None,
                    "mode=history: read the output.lines lines that end at this log offset, i.e. the "
                    "page before the one that returned before=N (omit for the newest page).",
                ),
            },
            "Read output.",
        ),
        s_kind("subscribe", {}, "Receive new output as notifications."),
        s_kind("unsubscribe", {}, "Stop notifications."),
    ],
    "shell_manage": [
        s_kind("rename", {"newName": s_str("New display name.", 32)}, "Rename.", ("newName",)),
        s_kind(
            "resize",
            {
                "cols": s_int(20, 1000, "New columns (omitted = keep)."),
                "rows": s_int(5, 500, "New rows (omitted = keep)."),
            },
            "Resize (give cols and/or rows).",
        ),
        s_kind("respawn", {}, "Restart the shell process."),
        s_kind("close", {}, "Close (a snapshot is kept)."),
        s_kind("reap", {}, "Remove lost records idle for 10 minutes or more."),
        s_kind(
            "idle",
            {"idleMinutes": s_int(0, 1440, "Auto-close after this many idle minutes; 0 = never.", 0)},
            "Set auto-close.",
        ),
        s_kind("snapshot", {}, "Take a snapshot."),
        s_kind("snapshot-list", {}, "List snapshots."),
        s_kind("doctor", {"note": s_str("Note written to the audit log.")}, "Self-check."),
        s_kind(
            "macro-set",
            {
                "name": s_str("Macro name (invoked as /NAME).", 64),
                "text": s_str("Macro text (a command fragment)."),
                "scope": s_enum(["global", "conversation", "shell"], "Visibility.", "conversation"),
                "submit": s_bool(True, "Press Enter after expanding."),
                "note": s_str("Note written to the audit log."),
            },
            "Define a macro.",
            ("name", "text"),
        ),
        s_kind("macro-rm", {"name": s_str("Macro name.", 64)}, "Delete a macro.", ("name",)),
        s_kind("macro-list", {}, "List macros."),
        s_kind("vault-list", {}, "List vault names and lock state (never values)."),
        s_kind(
            "macro-history",
            {"name": s_str("Macro name.", 64), "days": s_budget(1, 3650, "Days back.", 7)},
            "History of a macro.",
            ("name",),
        ),
        s_kind(
            "macro-restore",
            {
                "name": s_str("Macro name.", 64),
                "at": s_int(0, None, "Epoch ms of the version (from macro-history)."),
            },
            "Restore a macro version.",
            ("name", "at"),
        ),
        s_kind("workspace-save", {"name": s_str("Workspace name.", 64)}, "Save a workspace.", ("name",)),
        s_kind("workspace-list", {}, "List workspaces."),
        s_kind(
            "workspace-restore",
            {"name": s_str("Workspace name.", 64)},
            "Restore a workspace (opens new shells).",
            ("name",),
        ),
        s_kind("workspace-delete", {"name": s_str("Workspace name.", 64)}, "Delete a workspace.", ("name",)),
    ],
    "shell_audit": [
        s_kind(
            "audit",
            {
                "actor": s_str("Filter by actor (conversation id, panel, cli)."),
                "source": s_enum(["tool", "panel", "host", "cli"], "Filter by source."),
                "days": s_budget(1, 3650, "Days back.", 1),
                "export": s_bool(False, "Return raw JSONL records (at most output.lines)."),
            },
            "Read the audit log.",
        ),
    ],
}
