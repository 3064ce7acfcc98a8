"""JSON Schemas (draft 2020-12) of the seven persistent-shell tools' input, for MCP ``inputSchema``.

Invariant: the schemas describe exactly what ``parse`` accepts — same fields, kinds, enums,
ranges and defaults, English descriptions taken from spec 003 — so a client that follows them is
never refused for shape. They are documentation for the model; the validator stays the authority
(cross-field rules such as "bypassGuard needs a reason" are only described, not encoded).
``input_schema`` returns a fresh copy each time, so callers may edit it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from tether.tools.shells.args.schema_actions import (
    ACTION_SCHEMAS,
    DIALECT,
    PATTERN,
    POLL,
    TIMEOUT,
    Schema,
    s_bool,
    s_budget,
    s_enum,
    s_int,
    s_obj,
    s_str,
)

_TARGET = s_obj(
    {
        "sessions": s_str(
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
# What each wait kind means; a tool's schema lists only the kinds it takes (§3).
_KIND_MEANING = {
    "none": "return at once (async start)",
    "idle": "back at the prompt",
    "bell": "BEL rung",
    "match": "new output matches pattern",
    "exit": "command finished (optionally with code)",
    "file": "path exists",
    "noproc": "proc left the pane's process tree",
    "cpu": "foreground CPU below threshold",
    "foreground": "foreground process becomes proc",
}


def _kind_desc(tool: str) -> str:
    return "; ".join(f"{kind} = {_KIND_MEANING[kind]}" for kind in _WAIT_KINDS[tool]) + "."


def _wait(tool: str) -> Schema:
    if tool == "shell_send":
        return s_obj(
            {
                "pollMs": s_budget(
                    20, 100_000, "Interval for checking that the screen settled, in ms.", 150, floor=0
                )
            },
            "shell_send takes only pollMs.",
        )
    props: dict[str, Schema] = {
        "kind": s_enum(_WAIT_KINDS[tool], _kind_desc(tool), "idle"),
        "timeoutMs": TIMEOUT,
    }
    if tool == "shell_run":
        props["pollMs"] = POLL
    props["pattern"] = PATTERN
    props["code"] = s_int(0, 255, "kind=exit: expected exit code; a different one is reported at once.")
    if tool == "shell_read":
        props["runId"] = s_str("kind=exit: the run=<id> of a shell_run (default: the shell's latest run).")
    else:
        props["path"] = s_str("kind=file: file path (~ allowed).")
        props["threshold"] = {
            "type": "number",
            "minimum": 0,
            "maximum": 100,
            "description": "kind=cpu: CPU percentage.",
        }
    props["proc"] = s_str(
        "kind=noproc: process name that must disappear."
        if tool == "shell_run"
        else "kind=foreground: process name to become the foreground."
    )
    desc = "What to wait for. Each parameter is accepted only with its kind."
    if tool == "shell_read":
        desc += " Omit the block to read at once."
    return s_obj(props, desc)


def _output(tool: str) -> Schema:
    props: dict[str, Schema] = {
        "lines": s_budget(
            0,
            2000,
            "Lines to return (tail keeps the last N; since keeps "
            "up to 2000 and states how many were dropped).",
            20,
        )
    }
    if tool == "shell_run":
        props["showing"] = s_enum(
            ["since", "tail", "screen", "diff", "summary"],
            "since = output new in this call; tail = end of buffer incl. old screen; "
            "screen = visible screen; diff = change since the last read; "
            "summary = last lines plus total count.",
            "since",
        )
        props["structured"] = s_bool(
            True, "true = summary header plus one block per task; false = plain text."
        )
    return s_obj(props, "Output shape.")


def _safety(tool: str) -> Schema:
    if tool == "shell_manage":
        return s_obj(
            {"dryrun": s_bool(False, "Only report what close/reap/macro-rm/workspace-delete would do.")},
            "shell_manage takes only dryrun.",
        )
    return s_obj(
        {
            "bypassGuard": s_bool(
                False, "Skip the dangerous-command guard; only when the user asked; needs reason."
            ),
            "dryrun": s_bool(False, "Only report what would be sent; do nothing."),
            "lock": s_enum(
                ["require", "ignore"],
                "require = writes to one shell are serialised; ignore = do not wait for the lock.",
                "require",
            ),
            "reason": s_str("Reason recorded in the audit log (required with bypassGuard)."),
            "force": s_bool(
                False, "Proceed when a vault group is locked (its references are still refused)."
            ),
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
                "oneOf": list(ACTION_SCHEMAS[tool]),
            }
        elif block == "wait":
            blocks["wait"] = _wait(tool)
        elif block == "output":
            blocks["output"] = _output(tool)
        else:
            blocks["safety"] = _safety(tool)
    blocks["label"] = s_str("Name of this task's block in the result.", 64)
    task = s_obj(blocks, required=("action",))
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
            "concurrency": s_int(1, None, "Maximum parallel tasks, 1-8 (larger values are clamped to 8).", 4),
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }


_STATE: Schema = {
    "$schema": DIALECT,
    **s_obj(
        {
            "scope": s_enum(
                ["mine", "*"], "mine = shells of this conversation; * = every live shell.", "mine"
            ),
            "sessions": s_str("Filter by shell id (comma-separated)."),
            "label": s_str("Filter by display-name substring."),
            "fg": s_str("Filter by foreground-command substring."),
            "cwd": s_str("Filter by working-directory substring."),
            "state": s_str(
                "Filter by state, comma-separated (union): idle, busy, user-busy, ai-busy, locked, "
                "unlocked, attached."
            ),
            "owner": s_enum(["mine", "others", "panel", "unknown"], "Filter by creator."),
            "host": s_str("Filter by host: 'local' or a configured [hosts.NAME]."),
            "withGit": s_bool(False, "Add the git branch (one git call per row)."),
            "verbose": s_bool(False, "Add a diagnostic tail (server, host, watchdog, config)."),
        }
    ),
}

SCHEMAS: Mapping[str, Schema] = {**{tool: _tasks_schema(tool) for tool in _BLOCKS}, "shell_state": _STATE}


def input_schema(tool: str, *, sandbox_modes: Sequence[str] | None = None) -> Schema:
    """The input JSON Schema of ``tool`` (any of the seven); ``KeyError`` for another name.
    ``sandbox_modes``: the deployment confines, so ``shell_open`` kind=open offers
    ``sandbox_permissions`` + ``justification`` (exactly as the ``bash`` tool does)."""
    schema = copy.deepcopy(SCHEMAS[tool])
    if tool == "shell_open" and sandbox_modes is not None:
        action = schema["properties"]["tasks"]["items"]["properties"]["action"]["oneOf"][0]
        action["properties"]["sandbox_permissions"] = s_enum(
            list(sandbox_modes),
            "Sandbox mode of the new shell(s) for their whole life (default 'use_default'); a wider "
            "mode needs a justification and is granted by configuration or by a person.",
        )
        action["properties"]["justification"] = s_str(
            "Why the shell needs a wider sandbox mode (required when widening)."
        )
    return schema
