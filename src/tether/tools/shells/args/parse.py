"""Parse and validate the input of the seven persistent-shell tools (spec 003 §1 and its tables).

Invariant: the only way from raw tool arguments to the values of ``model`` is through
``parse_call`` (or the per-tool wrappers and ``parse_state``); every rule of §1 holds for what comes
out, and every violation is a ``UsageError`` whose message starts with the field's path
(``tasks[2].wait.timeoutMs``), names what was wrong and what is allowed:

- a call is ``{ tasks: [1..16], concurrency? }``; concurrency is 1..8 and a larger value is
  clamped (``Call.concurrency_note`` reports it), not refused; so are the other budgets
  (``wait.timeoutMs``, ``pollMs``, ``output.lines``, ``steps[].timeoutMs``, ``context``, ``days``:
  ``Call.clamps``), while every other out-of-range number is refused;
- each task holds only the blocks its tool consumes (§1 table) plus ``label``;
- ``action`` is required and each kind takes only its own payload;
- one explicit shell id in two tasks refuses the whole call; ``*`` is refused for writes.

Which shells ``mine`` means is decided later by the engine (it needs the live records); so is the
"mine is ambiguous for a write" refusal.

Public API (everything a handler needs)::

    parse_call(tool, raw) -> Call[Action]
    parse_open / parse_run / parse_send / parse_read / parse_manage / parse_audit(raw) -> Call[...]
    parse_state(raw) -> StateQuery
    input_schema(tool) -> dict          (JSON Schema 2020-12, for MCP inputSchema)
    js_regex_to_python(pattern) -> str;  compile_js_regex(pattern, field=...) -> re.Pattern[str]
    is_tmux_key(name) -> bool;           SHELL_ID_RE
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tether.errors import UsageError
from tether.tools.shells.args.actions import SHELL_ID_RE, check_shell_id, is_tmux_key, parse_action
from tether.tools.shells.args.blocks import parse_output, parse_safety, parse_target, parse_wait
from tether.tools.shells.args.fields import Fields, collecting_clamps, describe, join
from tether.tools.shells.args.model import (
    DEFAULT_CONCURRENCY,
    MAX_CONCURRENCY,
    MAX_TASKS,
    Action,
    AuditAction,
    Call,
    ManageAction,
    OpenAction,
    Output,
    Owner,
    ReadToolAction,
    RunToolAction,
    Safety,
    SendAction,
    StateName,
    StateQuery,
    StepsAction,
    SubscribeAction,
    Target,
    Task,
    ToolName,
    UnsubscribeAction,
)
from tether.tools.shells.args.regex import compile_js_regex, js_regex_to_python
from tether.tools.shells.args.schema import input_schema

TOOLS: tuple[ToolName, ...] = (
    "shell_open",
    "shell_run",
    "shell_send",
    "shell_read",
    "shell_manage",
    "shell_audit",
)
BLOCKS: Mapping[ToolName, tuple[str, ...]] = {
    "shell_run": ("target", "action", "wait", "output", "safety"),
    "shell_send": ("target", "action", "wait", "output", "safety"),
    "shell_read": ("target", "action", "wait", "output"),
    "shell_audit": ("target", "action", "output"),
    "shell_manage": ("target", "action", "safety"),
    "shell_open": ("action",),
}
ALL_BLOCKS = ("target", "action", "wait", "output", "safety")
# shell_manage kinds that change a shell: "*" is refused for them like for shell_run/shell_send.
MANAGE_WRITE_KINDS = frozenset({"rename", "resize", "respawn", "close", "idle", "snapshot"})
# The destructive kinds, the only ones a dry run applies to (spec: "仅破坏性动作").
MANAGE_DRYRUN_KINDS = frozenset({"close", "reap", "macro-rm", "workspace-delete"})
STATE_NAMES: tuple[StateName, ...] = (
    "idle",
    "busy",
    "user-busy",
    "ai-busy",
    "locked",
    "unlocked",
    "attached",
)
OWNERS: tuple[Owner, ...] = ("mine", "others", "panel", "unknown")
STATE_FIELDS = ("scope", "sessions", "label", "fg", "cwd", "state", "owner", "host", "withGit", "verbose")
# Fields that belong inside a task; seeing them at the top level means a missing { tasks: [...] }.
_TASK_LEVEL_HINT = "put them in { tasks: [{ target, action }] }"
_INNER_FIELDS = frozenset(
    {"session", "sessions", "shell", "id", "kind", "command", "text", "keys", "mode", "steps", "wait", "cmd"}
    | set(ALL_BLOCKS)
)


def parse_call(tool: str, raw: Any) -> Call[Action]:
    """Validate ``raw`` (the tool's argument object) for ``tool`` (one of ``TOOLS``)."""
    if tool not in TOOLS:
        raise UsageError(f"unknown tool {tool!r}; tools with tasks: {join(TOOLS)} (shell_state: parse_state)")
    name = tool
    f = Fields(raw, "")
    extra = f.unknown(("tasks", "concurrency"))
    if extra:
        hint = _TASK_LEVEL_HINT if _INNER_FIELDS & set(extra) else ""
        f.only(("tasks", "concurrency"), hint=hint)
    items = f.get("tasks")
    if items is None:
        raise UsageError(
            f"tasks: required; a call is {{ tasks: [{{ target, action }}] }} with 1 to {MAX_TASKS} tasks"
        )
    if not isinstance(items, list):
        raise UsageError(f"tasks: must be an array of 1 to {MAX_TASKS} tasks; got {describe(items)}")
    if not 1 <= len(items) <= MAX_TASKS:
        raise UsageError(f"tasks: must hold 1 to {MAX_TASKS} tasks; got {len(items)} (split the call)")
    requested = _concurrency(f)
    with collecting_clamps() as clamps:
        tasks = tuple(_task(name, item, i) for i, item in enumerate(items))
    _check_unique_shells(tasks)
    return Call(
        tool=name,
        tasks=tasks,
        concurrency=DEFAULT_CONCURRENCY if requested is None else min(requested, MAX_CONCURRENCY),
        concurrency_requested=requested,
        clamps=tuple(clamps),
    )


def _concurrency(f: Fields) -> int | None:
    value = f.get("concurrency")
    if value is None:
        return None
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or value < 1:
        raise UsageError(
            f"concurrency: must be an integer from 1 to {MAX_CONCURRENCY} (larger values are clamped to "
            f"{MAX_CONCURRENCY}; 1 = one task at a time); got {describe(value)}"
        )
    return int(value)


def _check_combination(task: Task[Action], path: str) -> None:
    """Rules that tie one block to another (each block alone was already valid)."""
    action, wait = task.action, task.wait
    if isinstance(action, OpenAction) and action.from_id is not None and action.count != 1:
        raise UsageError(f"{path}.action.count: from revives one shell; count must be 1 (got {action.count})")
    if isinstance(action, StepsAction) and wait is not None and wait.kind != "idle":
        raise UsageError(
            f"{path}.wait.kind: kind=steps waits per step (steps[i].expect); the task's wait gives only "
            f"timeoutMs/pollMs; {wait.kind} needs kind=run (steps inject no exit-code marker)"
        )
    if isinstance(action, SubscribeAction | UnsubscribeAction) and wait is not None:
        raise UsageError(f"{path}.wait: kind={action.kind} does not wait; remove the wait block")


def _task(tool: ToolName, raw: Any, index: int) -> Task[Action]:
    path = f"tasks[{index}]"
    f = Fields(raw, path)
    blocks = BLOCKS[tool]
    allowed = (*blocks, "label")
    extra = f.unknown(allowed)
    foreign = [name for name in extra if name in ALL_BLOCKS]
    if foreign:
        raise UsageError(
            f"{path}: {tool} does not take the {join(foreign)} block(s); it consumes {join(blocks)}"
        )
    if extra:
        f.only(allowed, hint=_TASK_LEVEL_HINT if _INNER_FIELDS & set(extra) else "")
    action = parse_action(tool, f.get("action"), f.at("action"))
    write = tool in ("shell_run", "shell_send") or (
        tool == "shell_manage" and action.kind in MANAGE_WRITE_KINDS
    )
    safety = parse_safety(tool, f.get("safety"), f.at("safety")) if "safety" in blocks else None
    if (
        tool == "shell_manage"
        and safety is not None
        and safety.dryrun
        and action.kind not in MANAGE_DRYRUN_KINDS
    ):
        raise UsageError(
            f"{f.at('safety')}.dryrun: applies only to the destructive kinds "
            f"{join(sorted(MANAGE_DRYRUN_KINDS))}; kind={action.kind} does not take it"
        )
    task = Task(
        index=index,
        label=f.string(
            "label", max_len=64, non_blank=True, what="a name for this task's block in the result"
        ),
        target=parse_target(f.get("target"), f.at("target"), write=write) if "target" in blocks else Target(),
        action=action,
        wait=parse_wait(tool, f.get("wait"), f.at("wait")) if "wait" in blocks else None,
        output=parse_output(tool, f.get("output"), f.at("output")) if "output" in blocks else Output(),
        safety=safety if safety is not None else Safety(),
    )
    _check_combination(task, path)
    return task


def _check_unique_shells(tasks: tuple[Task[Action], ...]) -> None:
    first: dict[str, int] = {}
    for task in tasks:
        for shell in task.target.ids:
            if shell in first:
                raise UsageError(
                    f"tasks[{task.index}].target.sessions: {shell} is also in tasks[{first[shell]}]; "
                    "the same shell can be operated on only once per call; split it into several calls"
                )
            first[shell] = task.index


def parse_open(raw: Any) -> Call[OpenAction]:
    return cast("Call[OpenAction]", parse_call("shell_open", raw))


def parse_run(raw: Any) -> Call[RunToolAction]:
    return cast("Call[RunToolAction]", parse_call("shell_run", raw))


def parse_send(raw: Any) -> Call[SendAction]:
    return cast("Call[SendAction]", parse_call("shell_send", raw))


def parse_read(raw: Any) -> Call[ReadToolAction]:
    return cast("Call[ReadToolAction]", parse_call("shell_read", raw))


def parse_manage(raw: Any) -> Call[ManageAction]:
    return cast("Call[ManageAction]", parse_call("shell_manage", raw))


def parse_audit(raw: Any) -> Call[AuditAction]:
    return cast("Call[AuditAction]", parse_call("shell_audit", raw))


def parse_state(raw: Any) -> StateQuery:
    """Validate ``shell_state``'s flat filters."""
    f = Fields({} if raw is None else raw, "")
    if f.has("tasks"):
        raise UsageError(f"tasks: shell_state takes flat filters, not tasks; allowed: {join(STATE_FIELDS)}")
    f.only(STATE_FIELDS)
    sessions = f.string("sessions", what="a shell id or comma-separated ids")
    ids: tuple[str, ...] = ()
    if sessions is not None:
        ids = tuple(check_shell_id(part.strip(), "sessions") for part in sessions.split(","))
    state = f.string("state", what=f"a state or comma-separated states ({join(STATE_NAMES)})")
    states: list[StateName] = []
    for part in [] if state is None else [p.strip() for p in state.split(",")]:
        matched = [name for name in STATE_NAMES if name == part]
        if not matched:
            raise UsageError(
                f"state: {part!r} is not a state; allowed: {join(STATE_NAMES)} (comma-separated)"
            )
        if matched[0] not in states:
            states.append(matched[0])
    return StateQuery(
        scope=f.enum("scope", ("mine", "*"), default="mine"),
        sessions=ids,
        label=f.string("label", what="a label substring"),
        fg=f.string("fg", what="a foreground command substring"),
        cwd=f.string("cwd", what="a working directory substring"),
        states=tuple(states),
        owner=f.enum("owner", OWNERS, default=None),
        host=f.string("host", max_len=32, non_blank=True, what="a host name"),
        with_git=f.boolean("withGit", default=False),
        verbose=f.boolean("verbose", default=False),
    )


__all__ = [
    "ALL_BLOCKS",
    "BLOCKS",
    "MANAGE_DRYRUN_KINDS",
    "MANAGE_WRITE_KINDS",
    "SHELL_ID_RE",
    "STATE_FIELDS",
    "STATE_NAMES",
    "TOOLS",
    "compile_js_regex",
    "input_schema",
    "is_tmux_key",
    "js_regex_to_python",
    "parse_audit",
    "parse_call",
    "parse_manage",
    "parse_open",
    "parse_read",
    "parse_run",
    "parse_send",
    "parse_state",
]
