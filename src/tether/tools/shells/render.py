"""What the persistent-shell tools return: the summary-plus-blocks text and ``structuredContent``.

Invariant: pure functions of their arguments (no tmux, no I/O, no clock). One task's facts are a
``TaskOutcome``: the operation's ``Outcome`` plus the task's index and label, or the task's error
with its stable code.

API::

    TaskOutcome(...);  render_result(outcomes, *, structured=True, notes=()) -> str
    summary_header(outcomes) -> "3 tasks: 2 ok, 1 error";  outcome_json(outcomes, *, notes=()) -> dict
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import RefusedError, TetherError
from tether.shell import ShellSandboxInfo
from tether.shells import Outcome
from tether.tools.bash import SANDBOX_SCHEMA, sandbox_json

# ---- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOutcome:
    """What one task produced. ``error`` set means the task failed (``ok`` is its absence).

    ``waited`` is the wait kind (``None``: nothing waited for); ``met`` False: not met, and
    ``unmet`` says why (``timeout``, ``shell ended``, ``exit=4 ≠ expected 0`` …; ``None``: not said).
    """

    index: int
    shell: str | None = None
    label: str | None = None
    run_id: str | None = None
    exit_code: int | None = None
    waited: str | None = None
    met: bool | None = None
    unmet: str | None = None
    elapsed_ms: int | None = None
    lines: tuple[str, ...] = ()
    error: str | None = None
    error_code: str | None = None  # the error's stable code (REFUSED, BLOCKED, NOT_FOUND, …)
    refused: bool = False  # a policy said no (lock, person typing, guard): the text says so first
    sandbox: ShellSandboxInfo | None = None  # a run in a confined shell: what its sandbox denied
    before: int | None = None  # shell_read history: the action.before of the page before this one

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def of(cls, index: int, label: str | None, o: Outcome) -> TaskOutcome:
        return cls(
            index=index,
            shell=o.shell,
            label=label,
            run_id=o.run_id,
            exit_code=o.exit_code,
            waited=o.waited,
            met=o.met,
            unmet=o.unmet,
            elapsed_ms=o.elapsed_ms,
            lines=o.lines,
            sandbox=o.sandbox,
            before=o.before,
        )

    @classmethod
    def failed(cls, index: int, label: str | None, exc: TetherError, shell: str | None = None) -> TaskOutcome:
        return cls(
            index=index,
            shell=shell,
            label=label,
            error=exc.message,
            error_code=exc.code,
            refused=isinstance(exc, RefusedError),
        )


def summary_header(outcomes: Sequence[TaskOutcome]) -> str:
    failed = sum(1 for o in outcomes if not o.ok)
    noun = "task" if len(outcomes) == 1 else "tasks"
    text = f"{len(outcomes)} {noun}: {len(outcomes) - failed} ok"
    return text + (f", {failed} error{'s' if failed != 1 else ''}" if failed else "")


def _elapsed(ms: int) -> str:
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def block_header(o: TaskOutcome) -> str:
    """``## dsh-ab12cd · build · ok · run=ab12cd34 · exit=0 · wait idle: met · 132 ms``; a wait not
    met says why: ``wait exit: timeout``, ``wait exit: unmet (shell ended)``."""
    parts = [o.shell or f"task {o.index}"]
    if o.label:
        parts.append(o.label)
    parts.append("ok" if o.ok else "error")
    if o.run_id:
        parts.append(f"run={o.run_id}")
    if o.exit_code is not None:
        parts.append(f"exit={o.exit_code}")
    if o.waited is not None and o.met is not None:
        parts.append(f"wait {o.waited}: {_wait_result(o)}")
    if o.elapsed_ms is not None:
        parts.append(_elapsed(o.elapsed_ms))
    return "## " + " · ".join(parts)


def render_result(
    outcomes: Sequence[TaskOutcome], *, structured: bool = True, notes: Sequence[str] = ()
) -> str:
    """The model-facing text of a call.

    structured: a header line, the ``notes`` (e.g. a concurrency clamp), then per task its
    ``block_header`` and its lines (or its error). Plain: the lines of every task in order, each
    task's error, timeout or non-zero exit as one bracketed line; no header.
    """
    out: list[str] = []
    if structured:
        out.append(summary_header(outcomes))
        out.extend(f"[{note}]" for note in notes)
        for o in outcomes:
            out.append(block_header(o))
            out.extend(o.lines if o.ok else [f"error: {_error(o)}"])
        return "\n".join(out)
    out.extend(f"[{note}]" for note in notes)
    for o in outcomes:
        out.extend(o.lines)
        who = o.shell or f"task {o.index}"
        if not o.ok:
            out.append(f"[{who} error: {_error(o)}]")
        elif o.met is False and o.unmet in (None, "timeout"):
            out.append(f"[{who} timed out waiting for {o.waited}]")
        elif o.met is False:
            out.append(f"[{who} wait {o.waited} unmet: {o.unmet}]")
        elif o.exit_code:
            out.append(f"[{who} exit={o.exit_code}]")
    return "\n".join(out)


def _wait_result(o: TaskOutcome) -> str:
    if o.met:
        return "met"
    # An outcome that does not say why is the timeout it always was.
    return "timeout" if o.unmet in (None, "timeout") else f"unmet ({o.unmet})"


def _error(o: TaskOutcome) -> str:
    # A policy's no (lock, person typing, guard) says so first: "REFUSED: …", "BLOCKED: …".
    if o.refused:
        return f"{o.error_code}: {o.error}"
    return o.error or ""


def outcome_json(outcomes: Sequence[TaskOutcome], *, notes: Sequence[str] = ()) -> dict[str, Any]:
    """``structuredContent`` of a call: ``{ ok, failed, notes, tasks: [...] }`` (``RESULT_SCHEMA``);
    ``notes`` are the call's clamped values, as the text shows them in brackets."""
    tasks = [
        {
            "index": o.index,
            "shell": o.shell,
            "label": o.label,
            "ok": o.ok,
            "error": o.error,
            "errorCode": o.error_code,
            "runId": o.run_id,
            "exitCode": o.exit_code,
            "waited": o.waited,
            "met": o.met,
            "unmet": o.unmet,
            "elapsedMs": o.elapsed_ms,
            "lines": list(o.lines),
            "sandbox": sandbox_json(o.sandbox) if o.sandbox is not None else None,
            "before": o.before,
        }
        for o in outcomes
    ]
    failed = sum(1 for o in outcomes if not o.ok)
    return {"ok": len(outcomes) - failed, "failed": failed, "notes": list(notes), "tasks": tasks}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "ok": {"type": "integer", "description": "Tasks that succeeded."},
        "failed": {"type": "integer", "description": "Tasks that failed."},
        "notes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Values of the call clamped into range, e.g. 'concurrency 12 clamped to 8'.",
        },
        "tasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "shell": _nullable("string"),
                    "label": _nullable("string"),
                    "ok": {"type": "boolean"},
                    "error": _nullable("string"),
                    "errorCode": {
                        **_nullable("string"),
                        "description": "The error's stable code (REFUSED, BLOCKED, NOT_FOUND, USAGE, …).",
                    },
                    "runId": _nullable("string"),
                    "exitCode": _nullable("integer"),
                    "waited": {**_nullable("string"), "description": "The wait kind, if any."},
                    "met": {**_nullable("boolean"), "description": "false = not met (unmet says why)."},
                    "unmet": {
                        **_nullable("string"),
                        "description": "Why a wait was not met: timeout, shell ended, exit=N ≠ expected M, "
                        "incomplete line, pattern overran (else null).",
                    },
                    "elapsedMs": _nullable("integer"),
                    "lines": {"type": "array", "items": {"type": "string"}},
                    "sandbox": {
                        "anyOf": [SANDBOX_SCHEMA, {"type": "null"}],
                        "description": "A run in a confined shell: the mode it runs under and each "
                        "operation its sandbox denied, as a one-shot result reports them (else null).",
                    },
                    "before": {
                        **_nullable("integer"),
                        "description": "shell_read mode=history, when older output exists: pass it as "
                        "action.before to read the page before this one (else null).",
                    },
                },
                "required": ["index", "ok", "lines"],
            },
        },
    },
    "required": ["ok", "failed", "tasks"],
}
