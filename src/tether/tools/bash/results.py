"""The three result shapes of the ``bash`` / ``pwsh`` tools and their published ``outputSchema``.

Invariant: every successful call returns exactly one of ``foreground``, ``promoted`` or
``background`` (``kind`` says which), and the structured value always validates against
``OUTPUT_SCHEMA``. Cancellation is never one of them: it is ``ToolAborted``. ``timeoutMs`` is the
deadline that applied; when resolve clamped the caller's value, ``requestedTimeoutMs`` holds what
was asked and the rendered text starts with ``[timeoutMs N clamped to M …]``.

The spec's ``rendered`` text is the result's text content, not a field of the structured value:
clients that hand the model ``structuredContent`` (Claude Code, Codex) would otherwise pay for the
output twice (``stdout.text`` and ``rendered``). Everything ``rendered`` says is in the fields
(exit code, signal, timeout, stop reason, truncation and spill path, sandbox denials).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from tether.shell.types import DroppedStream, ShellCollectedOutput, ShellRunResult, ShellSandboxInfo
from tether.tools.arguments import shown

DISABLED_TEXT: Final = "run_in_background is disabled for this deployment"
UNAVAILABLE_TEXT: Final = "background jobs unavailable"


class ToolAborted(asyncio.CancelledError):
    """The caller cancelled the call; the command was killed (spec: TOOL_ABORTED).

    A cancellation, not a result: it propagates like any cancellation, and a front door that sees
    it outside a cancelled request turns it into a tool error naming ``code``.
    """

    code: Final = "TOOL_ABORTED"

    def __init__(
        self, message: str = "the call was cancelled; the command and its children were killed"
    ) -> None:
        super().__init__(f"TOOL_ABORTED: {message}")
        self.message = message


_STREAM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "truncated": {"type": "boolean"},
        "spillPath": {"type": ["string", "null"]},
    },
    "required": ["text", "truncated", "spillPath"],
}

SANDBOX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "provider": {"type": "string"},
        "permissions": {"type": "string"},
        "denied": {"type": "boolean"},
        "denials": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string"},
                    "target": {"type": "string"},
                    "detail": {"type": "string"},
                },
                "required": ["kind", "target"],
            },
        },
        "escalationHint": {"type": ["string", "null"]},
        "bounds": {
            "type": "string",
            "description": "What the command could take (at most N processes and M MiB of memory), or "
            "what was not bounded here and why. A bound it met is a denial of kind 'limit'.",
        },
    },
    "required": ["provider", "permissions", "denied"],
}

_REQUESTED: dict[str, Any] = {
    "type": "integer",
    "description": "Only when the caller's timeoutMs was above [shell].max_timeout_ms: what was asked "
    "(timeoutMs is the maximum that applied instead).",
}

FOREGROUND_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "kind": {"const": "foreground"},
        "exitCode": {"type": ["integer", "null"]},
        "signal": {"type": ["string", "null"]},
        "timedOut": {"type": "boolean"},
        "aborted": {"type": "boolean"},
        "stopped": {"type": ["string", "null"], "description": "Why job_kill stopped it, if it did."},
        "timeoutMs": {"type": "integer", "description": "The deadline that applied."},
        "requestedTimeoutMs": _REQUESTED,
        "stdout": _STREAM,
        "stderr": _STREAM,
        "sandbox": SANDBOX_SCHEMA,
    },
    "required": [
        "kind",
        "exitCode",
        "signal",
        "timedOut",
        "aborted",
        "stopped",
        "timeoutMs",
        "stdout",
        "stderr",
    ],
}

SPILL_PATHS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": ["string", "null"]},
    "description": "Only when earlier output was dropped from memory: for each stream that lost some, "
    "the file holding the whole stream (null when none could be kept).",
}


def spill_paths(dropped: tuple[DroppedStream, ...]) -> dict[str, str | None]:
    """``spillPaths``: for each stream that lost bytes, the file holding all of it (or None)."""
    return {stream.name: stream.spill_path for stream in dropped}


SUSPENDED_SCHEMA: Final[dict[str, Any]] = {
    "type": "boolean",
    "description": "Only when true: every process of the command is stopped by a signal "
    "(kill -STOP $$); it will not go on by itself.",
}

PROMOTED_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "kind": {"const": "promoted"},
        "jobId": {"type": "string"},
        "timeoutMs": {"type": "integer", "description": "The deadline that applied."},
        "requestedTimeoutMs": _REQUESTED,
        "output": {"type": "string"},
        "spillPaths": SPILL_PATHS_SCHEMA,
        "suspended": SUSPENDED_SCHEMA,
    },
    "required": ["kind", "jobId", "timeoutMs", "output"],
}

BACKGROUND_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"kind": {"const": "background"}, "jobId": {"type": "string"}},
    "required": ["kind", "jobId"],
}

OUTPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "oneOf": [FOREGROUND_SCHEMA, PROMOTED_SCHEMA, BACKGROUND_SCHEMA],
}


def _stream(output: ShellCollectedOutput) -> dict[str, Any]:
    return {"text": output.text, "truncated": output.truncated, "spillPath": output.spill_path}


def sandbox_json(info: ShellSandboxInfo) -> dict[str, Any]:
    """``structuredContent.sandbox`` of a confined result (one-shot, or a run in a confined shell)."""
    return {
        "provider": info.provider,
        "permissions": info.permissions,
        "denied": info.denied,
        "denials": [{"kind": d.kind, "target": d.target, "detail": d.detail} for d in info.denials],
        "escalationHint": info.escalation_hint,
        **({"bounds": info.bounds} if info.bounds is not None else {}),
    }


def with_clamp_note(rendered: str, *, requested_timeout_ms: int | None, used_ms: int) -> str:
    """``rendered`` behind ``[timeoutMs N clamped to M …]`` (unchanged when nothing was clamped)."""
    if requested_timeout_ms is None:
        return rendered
    given = shown(requested_timeout_ms)
    note = f"[timeoutMs {given} clamped to {used_ms}, the maximum ([shell].max_timeout_ms)]"
    return f"{note}\n{rendered}"


def foreground(
    result: ShellRunResult, *, stopped: str | None, requested_timeout_ms: int | None = None
) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": "foreground",
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "aborted": result.aborted,
        "stopped": stopped,
        "timeoutMs": result.timeout_ms,
        "stdout": _stream(result.stdout),
        "stderr": _stream(result.stderr),
    }
    if requested_timeout_ms is not None:
        value["requestedTimeoutMs"] = requested_timeout_ms
    if result.sandbox is not None:
        value["sandbox"] = sandbox_json(result.sandbox)
    return value


def suspended_line(job_id: str) -> str:
    """A running job whose every process is stopped by a signal: waiting on it is waiting for ever."""
    return (
        f"[job {job_id} is suspended: stopped by a signal (SIGSTOP, SIGTSTP or SIGTTIN), it will not "
        "go on by itself; end it with job_kill]"
    )


def promoted_text(output: str, *, timeout_ms: int, job_id: str, suspended: bool = False) -> str:
    marker = f"[still running after {timeout_ms}ms; moved to background job {job_id}]"
    if suspended:
        marker += "\n" + suspended_line(job_id)
    if not output:
        return marker
    return f"{output}{'' if output.endswith(chr(10)) else chr(10)}{marker}"


def promoted(
    *,
    job_id: str,
    timeout_ms: int,
    output: str,
    requested_timeout_ms: int | None = None,
    dropped: tuple[DroppedStream, ...] = (),
    suspended: bool = False,
) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": "promoted",
        "jobId": job_id,
        "timeoutMs": timeout_ms,
        "output": output,
    }
    if requested_timeout_ms is not None:
        value["requestedTimeoutMs"] = requested_timeout_ms
    if dropped:
        value["spillPaths"] = spill_paths(dropped)
    if suspended:
        value["suspended"] = True
    return value


def background(*, job_id: str) -> dict[str, Any]:
    return {"kind": "background", "jobId": job_id}


def background_text(job_id: str, *, timeout_ignored: bool = False) -> str:
    text = f"started background job {job_id}; read its output with job_output, stop it with job_kill"
    if timeout_ignored:
        text += "\n[timeoutMs does not apply to a background job: it runs until it ends or job_kill stops it]"
    return text
