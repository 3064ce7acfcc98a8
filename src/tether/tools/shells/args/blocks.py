"""The ``target``, ``wait``, ``output`` and ``safety`` blocks of a task (spec 003 §2–§4).

Invariant: each block is read only for a tool that consumes it, and each parameter only where the
spec lists it — per tool (``pollMs`` is shell_run/shell_send, ``runId`` shell_read, ``showing`` and
``structured`` shell_run) and per wait kind (``pattern`` only for match, …). Anything else is
refused with the allowed fields listed, never ignored. The budgets ``timeoutMs`` (≤ 24 h),
``pollMs`` (20–100000) and ``output.lines`` (≤ 2000) are clamped into range, not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.errors import UsageError
from tether.tools.shells.args.actions import SHELL_ID_RE, check_shell_id
from tether.tools.shells.args.fields import Fields, describe, join
from tether.tools.shells.args.model import (
    DEFAULT_POLL_MS,
    DEFAULT_TIMEOUT_MS,
    MAX_OUTPUT_LINES,
    Output,
    Safety,
    Showing,
    Target,
    ToolName,
    Wait,
    WaitKind,
)
from tether.tools.shells.args.regex import compile_js_regex

TIMEOUT_MAX_MS = 86_400_000
WAIT_KINDS: Mapping[ToolName, tuple[WaitKind, ...]] = {
    "shell_run": ("none", "idle", "bell", "match", "exit", "file", "noproc", "cpu"),
    "shell_read": ("idle", "bell", "match", "exit", "foreground"),
}
# The parameters of each wait kind beyond the tool's common ones.
_KIND_FIELDS: Mapping[ToolName, Mapping[str, tuple[str, ...]]] = {
    "shell_run": {
        "match": ("pattern",),
        "exit": ("code",),
        "file": ("path",),
        "noproc": ("proc",),
        "cpu": ("threshold",),
    },
    "shell_read": {"match": ("pattern",), "exit": ("code", "runId"), "foreground": ("proc",)},
}
_COMMON_WAIT_FIELDS: Mapping[ToolName, tuple[str, ...]] = {
    "shell_run": ("kind", "timeoutMs", "pollMs"),
    "shell_read": ("kind", "timeoutMs"),
}
OUTPUT_FIELDS: Mapping[ToolName, tuple[str, ...]] = {
    "shell_run": ("lines", "showing", "structured"),
    "shell_send": ("lines",),
    "shell_read": ("lines",),
    "shell_audit": ("lines",),
}
SAFETY_FIELDS: Mapping[ToolName, tuple[str, ...]] = {
    "shell_run": ("bypassGuard", "dryrun", "lock", "reason", "force"),
    "shell_send": ("bypassGuard", "dryrun", "lock", "reason", "force"),
    "shell_manage": ("dryrun",),
}
SHOWING: tuple[Showing, ...] = ("since", "tail", "screen", "diff", "summary")


def parse_target(raw: Any, path: str, *, write: bool) -> Target:
    if raw is None:
        return Target()
    if isinstance(raw, str):
        raise UsageError(f'{path}: must be an object such as {{ "sessions": {raw!r} }}; got {describe(raw)}')
    f = Fields(raw, path)
    f.only(("sessions",))
    value = f.string("sessions", what="mine, * or comma-separated shell ids")
    if value is None:
        return Target()
    where = f.at("sessions")
    parts = [part.strip() for part in value.split(",")]
    if parts == ["mine"]:
        return Target()
    if parts == ["*"]:
        if write:
            raise UsageError(f'{path}.sessions="*" is not allowed for writes; use explicit ids or mine')
        return Target(mode="*")
    if "mine" in parts or "*" in parts:
        raise UsageError(f"{where}: mine and * stand alone; they cannot be combined with ids (got {value!r})")
    if any(not part for part in parts):
        raise UsageError(
            f"{where}: must be mine, *, or comma-separated shell ids like dsh-ab12cd; got {value!r}"
        )
    for part in parts:
        check_shell_id(part, where)
    seen: set[str] = set()
    for part in parts:
        if part in seen:
            raise UsageError(f"{where}: {part} is listed twice; name each shell once")
        seen.add(part)
    return Target(mode="ids", ids=tuple(parts))


def named_in(arguments: Any) -> list[str] | None:
    """The shell ids a call's raw arguments name, when every task names its shells by id, as
    ``parse_target`` will read them (``None`` otherwise, or if they are malformed: the parse
    reports that). A hint for ``ToolDef.expect``, read before the call is parsed."""
    tasks = arguments.get("tasks") if isinstance(arguments, dict) else None
    if not isinstance(tasks, list) or not tasks:
        return None
    named: list[str] = []
    for task in tasks:
        target = task.get("target") if isinstance(task, dict) else None
        sessions = target.get("sessions") if isinstance(target, dict) else None
        if not isinstance(sessions, str):
            return None
        parts = [part.strip() for part in sessions.split(",")]
        if not all(SHELL_ID_RE.fullmatch(part) for part in parts):
            return None
        named.extend(parts)
    return named


def parse_wait(tool: ToolName, raw: Any, path: str) -> Wait | None:
    """The wait of a shell_run / shell_read / shell_send task (``None``: shell_read without one)."""
    if tool == "shell_send":
        if raw is None:
            return Wait()
        f = Fields(raw, path)
        f.only(("pollMs",), hint="shell_send waits only for the screen to settle; pollMs is its interval")
        return Wait(poll_ms=_poll(f))
    if raw is None:
        return Wait() if tool == "shell_run" else None
    f = Fields(raw, path)
    kinds = WAIT_KINDS[tool]
    kind_raw = f.get("kind")
    kind: WaitKind = "idle"
    if kind_raw is not None:
        matched = [k for k in kinds if k == kind_raw]
        if not matched:
            raise f.fail("kind", f"{tool} waits for {join(kinds)}; got {describe(kind_raw)}")
        kind = matched[0]
    own = _KIND_FIELDS[tool].get(kind, ())
    allowed = ("kind",) if kind == "none" else (*_COMMON_WAIT_FIELDS[tool], *own)
    extra = f.unknown(allowed)
    if extra:
        owners = sorted({k for name in extra for k, fields in _KIND_FIELDS[tool].items() if name in fields})
        hint = f"{join(extra)}: for kind={'/'.join(owners)}" if owners else ""
        if "pollMs" in extra and tool == "shell_read":
            hint = "shell_read takes no pollMs"
        f.only(allowed, context=f"for kind={kind} on {tool}", hint=hint)
    return Wait(
        kind=kind,
        timeout_ms=f.budget("timeoutMs", lo=0, hi=TIMEOUT_MAX_MS, default=DEFAULT_TIMEOUT_MS, unit="ms"),
        poll_ms=_poll(f),
        code=f.integer("code", lo=0, hi=255, default=None, unit="exit code"),
        run_id=_run_id(f),
        **_kind_params(f, kind),
    )


def _poll(f: Fields) -> int:
    return f.budget("pollMs", lo=20, hi=100_000, default=DEFAULT_POLL_MS, unit="ms", floor=0)


def _run_id(f: Fields) -> str | None:
    run_id = f.string("runId", max_len=64, non_blank=True, what="the run=<id> a shell_run returned")
    if run_id is not None and any(c.isspace() for c in run_id):
        raise f.fail("runId", f"must be the run=<id> a shell_run returned (no spaces); got {run_id!r}")
    return run_id


def _kind_params(f: Fields, kind: WaitKind) -> dict[str, Any]:
    if kind == "match":
        pattern = f.required_string("pattern", non_blank=False, what="a JavaScript regular expression")
        if not pattern:
            raise f.fail("pattern", "must not be empty (it would match at once)")
        return {"pattern": pattern, "regex": compile_js_regex(pattern, field=f.at("pattern"))}
    if kind == "file":
        return {"path": f.required_string("path", what="a file path (~ allowed)", why="kind=file")}
    if kind in ("noproc", "foreground"):
        return {"proc": f.required_string("proc", what="a process name", why=f"kind={kind}")}
    if kind == "cpu":
        threshold = f.number("threshold", lo=0, hi=100, unit="% CPU")
        if threshold is None:
            raise f.missing("threshold", "kind=cpu; a CPU percentage from 0 to 100")
        return {"threshold": threshold}
    return {}


def parse_output(tool: ToolName, raw: Any, path: str) -> Output:
    if raw is None:
        return Output()
    f = Fields(raw, path)
    allowed = OUTPUT_FIELDS[tool]
    hint = ""
    if tool != "shell_run" and ({"showing", "structured"} & set(f.unknown(allowed))):
        hint = "showing and structured are shell_run only" + (
            "; shell_read chooses the shape with action.mode" if tool == "shell_read" else ""
        )
    f.only(allowed, context=f"on {tool}", hint=hint)
    return Output(
        lines=f.budget("lines", lo=0, hi=MAX_OUTPUT_LINES, default=20, unit="lines"),
        showing=f.enum("showing", SHOWING, default="since"),
        structured=f.boolean("structured", default=True),
    )


def parse_safety(tool: ToolName, raw: Any, path: str) -> Safety:
    if raw is None:
        return Safety()
    f = Fields(raw, path)
    allowed = SAFETY_FIELDS[tool]
    hint = "shell_manage's safety takes only dryrun" if tool == "shell_manage" else ""
    f.only(allowed, context=f"on {tool}", hint=hint)
    safety = Safety(
        bypass_guard=f.boolean("bypassGuard", default=False),
        dryrun=f.boolean("dryrun", default=False),
        lock=f.enum("lock", ("require", "ignore"), default="require"),
        reason=f.string("reason", what="a reason for the audit log"),
        force=f.boolean("force", default=False),
    )
    if safety.bypass_guard and (safety.reason is None or not safety.reason.strip()):
        raise f.fail(
            "reason",
            "required, and not blank, when bypassGuard is true; say why the user asked to bypass the guard",
        )
    return safety
