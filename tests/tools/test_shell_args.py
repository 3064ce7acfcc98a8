"""Argument model of the seven persistent-shell tools: every kind, default, range edge and refusal."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tether.errors import UsageError
from tether.tools.shells.args import parse as sa
from tether.tools.shells.args.actions import CONFINED_OPEN_FIELDS, KINDS
from tether.tools.shells.args.blocks import WAIT_KINDS
from tether.tools.shells.args.model import (
    Action,
    AuditAction,
    Call,
    CloseAction,
    DoctorAction,
    IdleAction,
    MacroHistoryAction,
    MacroListAction,
    MacroRestoreAction,
    MacroRmAction,
    MacroSetAction,
    OpenAction,
    Output,
    ReadAction,
    ReapAction,
    RenameAction,
    ResizeAction,
    RespawnAction,
    RetryAction,
    RunAction,
    Safety,
    SendAction,
    SnapshotAction,
    SnapshotListAction,
    StateQuery,
    Step,
    StepExpect,
    StepsAction,
    SubscribeAction,
    Target,
    Task,
    ToolName,
    UnsubscribeAction,
    VaultListAction,
    Wait,
    WorkspaceDeleteAction,
    WorkspaceListAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.tools.shells.args.parse import parse_call, parse_state

ID = "dsh-ab12cd"
DEFAULT_ACTION = {
    "shell_open": {"kind": "open"},
    "shell_run": {"kind": "run", "command": "ls"},
    "shell_send": {"kind": "send", "text": "x"},
    "shell_read": {"kind": "read"},
    "shell_manage": {"kind": "close"},
    "shell_audit": {"kind": "audit"},
}


def one(tool: str, action: dict[str, Any] | None = None, **blocks: Any) -> dict[str, Any]:
    task: dict[str, Any] = {"action": action if action is not None else DEFAULT_ACTION[tool], **blocks}
    if tool != "shell_open" and "target" not in blocks:
        task["target"] = {"sessions": ID}
    return {"tasks": [task]}


def task0(tool: str, action: dict[str, Any] | None = None, **blocks: Any) -> Task[Action]:
    return parse_call(tool, one(tool, action, **blocks)).tasks[0]


def refused(tool: str, raw: Any) -> str:
    with pytest.raises(UsageError) as info:
        parse_call(tool, raw)
    assert info.value.code == "INVALID_ARGUMENT"
    return str(info.value)


def expect_refusal(tool: str, raw: Any, *fragments: str) -> None:
    message = refused(tool, raw)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


# ---- actions: every kind with its defaults ------------------------------------------------------

KIND_DEFAULTS: list[tuple[str, dict[str, Any], object]] = [
    ("shell_open", {"kind": "open"}, OpenAction()),
    ("shell_run", {"kind": "run", "command": "make"}, RunAction(command="make")),
    ("shell_run", {"kind": "retry", "mode": "last"}, RetryAction(mode="last")),
    ("shell_run", {"kind": "retry", "mode": "last-failed"}, RetryAction(mode="last-failed")),
    ("shell_send", {"kind": "send", "text": ""}, SendAction(text="")),
    ("shell_read", {"kind": "read"}, ReadAction()),
    ("shell_read", {"kind": "subscribe"}, SubscribeAction()),
    ("shell_read", {"kind": "unsubscribe"}, UnsubscribeAction()),
    ("shell_manage", {"kind": "rename", "newName": "web"}, RenameAction(new_name="web")),
    ("shell_manage", {"kind": "resize", "cols": 80}, ResizeAction(cols=80)),
    ("shell_manage", {"kind": "resize", "rows": 24}, ResizeAction(rows=24)),
    ("shell_manage", {"kind": "respawn"}, RespawnAction()),
    ("shell_manage", {"kind": "close"}, CloseAction()),
    ("shell_manage", {"kind": "reap"}, ReapAction()),
    ("shell_manage", {"kind": "idle"}, IdleAction(idle_minutes=0)),
    ("shell_manage", {"kind": "snapshot"}, SnapshotAction()),
    ("shell_manage", {"kind": "snapshot-list"}, SnapshotListAction()),
    ("shell_manage", {"kind": "doctor"}, DoctorAction()),
    ("shell_manage", {"kind": "doctor", "note": "after upgrade"}, DoctorAction(note="after upgrade")),
    (
        "shell_manage",
        {"kind": "macro-set", "name": "deploy", "text": "make deploy"},
        MacroSetAction(name="deploy", text="make deploy", scope="conversation", submit=True),
    ),
    ("shell_manage", {"kind": "macro-rm", "name": "deploy"}, MacroRmAction(name="deploy")),
    ("shell_manage", {"kind": "macro-list"}, MacroListAction()),
    ("shell_manage", {"kind": "vault-list"}, VaultListAction()),
    ("shell_manage", {"kind": "macro-history", "name": "d"}, MacroHistoryAction(name="d", days=7)),
    (
        "shell_manage",
        {"kind": "macro-restore", "name": "d", "at": 1764470000000},
        MacroRestoreAction(name="d", at=1764470000000),
    ),
    ("shell_manage", {"kind": "workspace-save", "name": "w"}, WorkspaceSaveAction(name="w")),
    ("shell_manage", {"kind": "workspace-list"}, WorkspaceListAction()),
    ("shell_manage", {"kind": "workspace-restore", "name": "w"}, WorkspaceRestoreAction(name="w")),
    ("shell_manage", {"kind": "workspace-delete", "name": "w"}, WorkspaceDeleteAction(name="w")),
    ("shell_audit", {"kind": "audit"}, AuditAction(days=1, export=False)),
]


@pytest.mark.parametrize(("tool", "action", "expected"), KIND_DEFAULTS)
def test_every_kind_parses_with_its_defaults(tool: str, action: dict[str, Any], expected: object) -> None:
    assert task0(tool, action).action == expected


def test_every_kind_of_every_tool_is_covered() -> None:
    covered = {(tool, action["kind"]) for tool, action, _ in KIND_DEFAULTS} | {("shell_run", "steps")}
    declared = {(tool, kind) for tool, kinds in KINDS.items() for kind in kinds}
    assert covered == declared


def test_open_defaults_and_full_payload() -> None:
    action = OpenAction()
    # cols/rows not given: 120 x 32 at open, the snapshot's size with from (None until then).
    assert (action.count, action.cols, action.rows, action.idle_minutes, action.watch) == (
        1,
        None,
        None,
        None,
        False,
    )
    full = {
        "kind": "open",
        "count": 1,
        "cwd": "/repo",
        "label": "build",
        "cols": 200,
        "rows": 50,
        "idleMinutes": 0,
        "watch": True,
        "from": "dsh-old123",
    }
    assert task0("shell_open", full).action == OpenAction(
        count=1,
        cwd="/repo",
        label="build",
        cols=200,
        rows=50,
        idle_minutes=0,
        watch=True,
        from_id="dsh-old123",
    )


def test_read_full_payload_compiles_search() -> None:
    action = task0(
        "shell_read",
        {
            "kind": "read",
            "search": r"err(?<n>\d+)",
            "context": 8,
            "matchOffset": 100000,
            "mode": "diff",
            "ifChanged": True,
        },
    ).action
    assert isinstance(action, ReadAction)
    assert (action.context, action.match_offset, action.mode, action.if_changed) == (8, 100000, "diff", True)
    assert action.regex is not None and action.regex.search("err42") and not action.regex.search("err٤")


@pytest.mark.parametrize("mode", ["tail", "screen", "history", "since", "diff", "summary"])
def test_every_read_mode(mode: str) -> None:
    action = task0("shell_read", {"kind": "read", "mode": mode}).action
    assert isinstance(action, ReadAction) and action.mode == mode


def test_send_keys_and_prekeys() -> None:
    action = task0(
        "shell_send", {"kind": "send", "text": "print(1+1)", "keys": ["Enter"], "preKeys": ["C-c", "Escape"]}
    ).action
    assert action == SendAction(text="print(1+1)", keys=("Enter",), pre_keys=("C-c", "Escape"))


@pytest.mark.parametrize(
    "key",
    [
        "Enter",
        "enter",
        "C-c",
        "c-c",
        "M-x",
        "S-Up",
        "C-M-a",
        "^C",
        "Escape",
        "Tab",
        "BTab",
        "BSpace",
        "Space",
        "F1",
        "F12",
        "IC",
        "Insert",
        "Delete",
        "PageUp",
        "PgDn",
        "NPage",
        "KPEnter",
        "KP.",
        "0x41",
        "q",
        ":",
        "é",
    ],
)
def test_tmux_key_names_accepted(key: str) -> None:
    assert sa.is_tmux_key(key)


@pytest.mark.parametrize("key", ["Ctrl-C", "ctrl+c", "Esc", "F13", "Return", "hello", "", "C-", "\x03"])
def test_non_tmux_key_names_refused(key: str) -> None:
    assert not sa.is_tmux_key(key)
    expect_refusal(
        "shell_send",
        one("shell_send", {"kind": "send", "text": "", "keys": ["Enter", key]}),
        "tasks[0].action.keys[1]",
        "not a tmux key name",
        "C-c",
    )


def test_ctrl_spelling_gets_a_suggestion() -> None:
    expect_refusal(
        "shell_send",
        one("shell_send", {"kind": "send", "text": "", "preKeys": ["CTRL-D"]}),
        "did you mean C-d?",
    )


def test_macro_set_full_payload() -> None:
    action = task0(
        "shell_manage",
        {
            "kind": "macro-set",
            "name": "up",
            "text": "docker compose up",
            "scope": "shell",
            "submit": False,
            "note": "n",
        },
    ).action
    assert action == MacroSetAction(
        name="up", text="docker compose up", scope="shell", submit=False, note="n"
    )


def test_audit_full_payload() -> None:
    action = task0(
        "shell_audit", {"kind": "audit", "actor": "panel", "source": "cli", "days": 3650, "export": True}
    ).action
    assert action == AuditAction(actor="panel", source="cli", days=3650, export=True)


def test_steps_full_payload() -> None:
    action = task0(
        "shell_run",
        {
            "kind": "steps",
            "steps": [
                {"label": "start", "send": "python3", "expect": {"kind": "match", "pattern": ">>> $"}},
                {"send": "print(1+1)", "expect": "idle", "timeoutMs": 5000},
                {"expect": {"kind": "file", "path": "~/done"}},
                {"send": "exit()", "expect": {"kind": "bell"}},
            ],
        },
    ).action
    assert isinstance(action, StepsAction)
    first, second, third, fourth = action.steps
    assert first.label == "start" and first.expect is not None and first.expect.kind == "match"
    assert first.expect.regex is not None and first.expect.regex.search(">>> ")
    assert second == Step(send="print(1+1)", expect=StepExpect(kind="idle"), timeout_ms=5000)
    assert third == Step(expect=StepExpect(kind="file", path="~/done"))
    assert fourth.expect == StepExpect(kind="bell")


# ---- blocks: defaults ---------------------------------------------------------------------------


def test_run_task_defaults() -> None:
    task = task0("shell_run")
    assert task.wait == Wait(kind="idle", timeout_ms=30000, poll_ms=150)
    assert task.output == Output(lines=20, showing="since", structured=True)
    assert task.safety == Safety(bypass_guard=False, dryrun=False, lock="require", reason=None, force=False)
    assert task.label is None and task.index == 0


def test_target_defaults_to_mine_and_read_without_wait_reads_at_once() -> None:
    task = parse_call("shell_read", {"tasks": [{"action": {"kind": "read"}}]}).tasks[0]
    assert task.target == Target(mode="mine", ids=())
    assert task.wait is None


def test_send_wait_is_settle_with_poll_only() -> None:
    assert task0("shell_send").wait == Wait(kind="idle", poll_ms=150)
    assert task0("shell_send", wait={"pollMs": 20}).wait == Wait(kind="idle", poll_ms=20)


def test_tools_without_wait_have_none() -> None:
    for tool in ("shell_open", "shell_manage", "shell_audit"):
        assert task0(tool).wait is None


@pytest.mark.parametrize(
    ("sessions", "expected"),
    [
        ("mine", Target()),
        ("*", Target(mode="*")),
        (ID, Target(mode="ids", ids=(ID,))),
        ("dsh-a, dsh-b", Target(mode="ids", ids=("dsh-a", "dsh-b"))),
    ],
)
def test_target_values(sessions: str, expected: Target) -> None:
    assert task0("shell_read", target={"sessions": sessions}).target == expected


def test_label_on_task() -> None:
    assert task0("shell_run", label="build step").label == "build step"


# ---- wait kinds ---------------------------------------------------------------------------------

WAIT_OK: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("shell_run", {"kind": "none"}, {"kind": "none"}),
    (
        "shell_run",
        {"kind": "idle", "timeoutMs": 0, "pollMs": 20},
        {"kind": "idle", "timeout_ms": 0, "poll_ms": 20},
    ),
    (
        "shell_run",
        {"kind": "bell", "timeoutMs": 86400000, "pollMs": 100000},
        {"kind": "bell", "timeout_ms": 86400000, "poll_ms": 100000},
    ),
    ("shell_run", {"kind": "match", "pattern": "done"}, {"kind": "match", "pattern": "done"}),
    ("shell_run", {"kind": "exit"}, {"kind": "exit", "code": None}),
    ("shell_run", {"kind": "exit", "code": 0}, {"kind": "exit", "code": 0}),
    ("shell_run", {"kind": "exit", "code": 255}, {"kind": "exit", "code": 255}),
    ("shell_run", {"kind": "file", "path": "~/x"}, {"kind": "file", "path": "~/x"}),
    ("shell_run", {"kind": "noproc", "proc": "make"}, {"kind": "noproc", "proc": "make"}),
    ("shell_run", {"kind": "cpu", "threshold": 0}, {"kind": "cpu", "threshold": 0.0}),
    ("shell_run", {"kind": "cpu", "threshold": 100}, {"kind": "cpu", "threshold": 100.0}),
    ("shell_run", {"kind": "cpu", "threshold": 2.5}, {"kind": "cpu", "threshold": 2.5}),
    ("shell_run", {"timeoutMs": 5000.0}, {"kind": "idle", "timeout_ms": 5000}),
    ("shell_read", {}, {"kind": "idle"}),
    ("shell_read", {"kind": "bell"}, {"kind": "bell"}),
    ("shell_read", {"kind": "match", "pattern": "x"}, {"kind": "match"}),
    (
        "shell_read",
        {"kind": "exit", "runId": "ab12cd34", "code": 3},
        {"kind": "exit", "run_id": "ab12cd34", "code": 3},
    ),
    ("shell_read", {"kind": "foreground", "proc": "vim"}, {"kind": "foreground", "proc": "vim"}),
]


@pytest.mark.parametrize(("tool", "wait", "expected"), WAIT_OK)
def test_wait_kinds(tool: str, wait: dict[str, Any], expected: dict[str, Any]) -> None:
    parsed = task0(tool, wait=wait).wait
    assert parsed is not None
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name
    if parsed.kind == "match":
        assert parsed.regex is not None and parsed.pattern is not None
    else:
        assert parsed.regex is None and parsed.pattern is None


WAIT_REFUSED: list[tuple[str, Any, tuple[str, ...]]] = [
    (
        "shell_run",
        {"kind": "foreground", "proc": "x"},
        ("tasks[0].wait.kind", "none, idle, bell, match, exit, file, noproc, cpu"),
    ),
    (
        "shell_read",
        {"kind": "cpu", "threshold": 1},
        ("tasks[0].wait.kind", "idle, bell, match, exit, foreground"),
    ),
    ("shell_read", {"kind": "none"}, ("tasks[0].wait.kind",)),
    ("shell_read", {"kind": "file", "path": "x"}, ("tasks[0].wait.kind",)),
    ("shell_read", {"kind": "noproc", "proc": "x"}, ("tasks[0].wait.kind",)),
    ("shell_run", {"kind": "sleep"}, ("tasks[0].wait.kind", "'sleep'")),
    ("shell_run", {"timeoutMs": -1}, ("tasks[0].wait.timeoutMs", "at least 0", "got -1")),
    ("shell_run", {"timeoutMs": "30s"}, ("tasks[0].wait.timeoutMs", "integer", "'30s' (a string)")),
    ("shell_run", {"timeoutMs": 1.5}, ("tasks[0].wait.timeoutMs", "integer")),
    ("shell_run", {"timeoutMs": True}, ("tasks[0].wait.timeoutMs", "true (a boolean)")),
    ("shell_run", {"pollMs": -1}, ("tasks[0].wait.pollMs", "at least 0", "below 20 to 20", "got -1")),
    ("shell_run", {"pollMs": 20.5}, ("tasks[0].wait.pollMs", "integer", "20.5")),
    ("shell_run", {"kind": "exit", "code": 256}, ("tasks[0].wait.code", "0 to 255")),
    ("shell_run", {"kind": "exit", "code": -1}, ("tasks[0].wait.code", "0 to 255")),
    ("shell_run", {"kind": "cpu", "threshold": 100.5}, ("tasks[0].wait.threshold", "0 to 100")),
    ("shell_run", {"kind": "cpu", "threshold": -0.1}, ("tasks[0].wait.threshold", "0 to 100")),
    ("shell_run", {"kind": "cpu"}, ("tasks[0].wait.threshold", "required")),
    ("shell_run", {"kind": "match"}, ("tasks[0].wait.pattern", "required")),
    ("shell_run", {"kind": "match", "pattern": ""}, ("tasks[0].wait.pattern", "empty")),
    (
        "shell_run",
        {"kind": "match", "pattern": "(unclosed"},
        ("tasks[0].wait.pattern", "invalid regular expression"),
    ),
    ("shell_run", {"kind": "match", "pattern": "(?i)x"}, ("tasks[0].wait.pattern", "not JavaScript")),
    ("shell_run", {"kind": "file"}, ("tasks[0].wait.path", "required")),
    ("shell_run", {"kind": "noproc"}, ("tasks[0].wait.proc", "required")),
    ("shell_read", {"kind": "foreground"}, ("tasks[0].wait.proc", "required")),
    # a parameter given for the wrong kind, listing the allowed fields
    (
        "shell_run",
        {"kind": "idle", "pattern": "x"},
        (
            "tasks[0].wait",
            "unknown field(s) pattern",
            "allowed for kind=idle on shell_run: kind, timeoutMs, pollMs",
            "for kind=match",
        ),
    ),
    ("shell_run", {"kind": "match", "pattern": "x", "code": 0}, ("code", "kind, timeoutMs, pollMs, pattern")),
    ("shell_run", {"code": 0}, ("unknown field(s) code", "for kind=exit")),
    (
        "shell_run",
        {"kind": "none", "timeoutMs": 5},
        ("unknown field(s) timeoutMs", "allowed for kind=none on shell_run: kind"),
    ),
    (
        "shell_run",
        {"kind": "exit", "runId": "x"},
        ("unknown field(s) runId", "kind, timeoutMs, pollMs, code"),
    ),
    ("shell_run", {"kind": "cpu", "threshold": 5, "proc": "x"}, ("unknown field(s) proc", "for kind=noproc")),
    ("shell_read", {"pollMs": 100}, ("unknown field(s) pollMs", "shell_read takes no pollMs")),
    ("shell_read", {"kind": "foreground", "proc": "vim", "threshold": 5}, ("unknown field(s) threshold",)),
    ("shell_run", {"until": "done"}, ("unknown field(s) until", "kind, timeoutMs, pollMs")),
    ("shell_send", {"kind": "idle"}, ("tasks[0].wait", "unknown field(s) kind", "allowed: pollMs", "settle")),
    ("shell_send", {"timeoutMs": 5}, ("unknown field(s) timeoutMs", "allowed: pollMs")),
    ("shell_send", {"pollMs": -10}, ("tasks[0].wait.pollMs", "at least 0")),
    ("shell_run", {"kind": "exit", "code": "0"}, ("tasks[0].wait.code", "'0' (a string)")),
    ("shell_read", {"kind": "exit", "runId": "a b"}, ("tasks[0].wait.runId", "no spaces")),
    ("shell_read", {"kind": "exit", "runId": "  "}, ("tasks[0].wait.runId",)),
    ("shell_run", "idle", ("tasks[0].wait", "must be an object")),
]


@pytest.mark.parametrize(("tool", "wait", "fragments"), WAIT_REFUSED)
def test_wait_refusals(tool: str, wait: Any, fragments: tuple[str, ...]) -> None:
    expect_refusal(tool, one(tool, wait=wait), *fragments)


# ---- output and safety --------------------------------------------------------------------------


@pytest.mark.parametrize("showing", ["since", "tail", "screen", "diff", "summary"])
def test_output_showing(showing: str) -> None:
    assert task0("shell_run", output={"showing": showing}).output.showing == showing


@pytest.mark.parametrize("lines", [0, 2000])
def test_output_lines_edges(lines: int) -> None:
    assert task0("shell_read", output={"lines": lines}).output.lines == lines


def test_output_structured_false() -> None:
    assert task0("shell_run", output={"structured": False}).output.structured is False


OUTPUT_REFUSED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("shell_run", {"lines": -1}, ("tasks[0].output.lines", "at least 0", "above 2000 is clamped to 2000")),
    ("shell_run", {"lines": 20.5}, ("tasks[0].output.lines", "integer", "20.5")),
    ("shell_run", {"showing": "history"}, ("tasks[0].output.showing", "since, tail, screen, diff, summary")),
    ("shell_run", {"structured": "yes"}, ("tasks[0].output.structured", "boolean")),
    (
        "shell_read",
        {"showing": "tail"},
        ("unknown field(s) showing", "allowed on shell_read: lines", "action.mode"),
    ),
    ("shell_send", {"structured": False}, ("unknown field(s) structured", "shell_run only")),
    ("shell_audit", {"showing": "tail"}, ("unknown field(s) showing",)),
]


@pytest.mark.parametrize(("tool", "output", "fragments"), OUTPUT_REFUSED)
def test_output_refusals(tool: str, output: dict[str, Any], fragments: tuple[str, ...]) -> None:
    expect_refusal(tool, one(tool, output=output), *fragments)


def test_safety_full() -> None:
    safety = task0(
        "shell_run",
        safety={"bypassGuard": True, "reason": "user asked", "dryrun": True, "lock": "ignore", "force": True},
    ).safety
    assert safety == Safety(bypass_guard=True, reason="user asked", dryrun=True, lock="ignore", force=True)


def test_manage_dryrun_on_destructive_kinds() -> None:
    for kind in ("close", "reap", "macro-rm", "workspace-delete"):
        action: dict[str, str] = {"kind": kind} if kind in ("close", "reap") else {"kind": kind, "name": "n"}
        assert task0("shell_manage", action, safety={"dryrun": True}).safety.dryrun


SAFETY_REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    ("shell_run", {}, {"bypassGuard": True}, ("tasks[0].safety.reason", "bypassGuard")),
    ("shell_run", {}, {"bypassGuard": True, "reason": ""}, ("tasks[0].safety.reason", "blank")),
    ("shell_send", {}, {"bypassGuard": True, "reason": " \t "}, ("tasks[0].safety.reason", "blank")),
    ("shell_run", {}, {"lock": "wait"}, ("tasks[0].safety.lock", "require, ignore")),
    ("shell_run", {}, {"dryrun": 1}, ("tasks[0].safety.dryrun", "boolean")),
    (
        "shell_manage",
        {"kind": "close"},
        {"bypassGuard": True, "reason": "x"},
        ("unknown field(s) bypassGuard", "allowed on shell_manage: dryrun", "only dryrun"),
    ),
    ("shell_manage", {"kind": "close"}, {"lock": "ignore"}, ("unknown field(s) lock",)),
    (
        "shell_manage",
        {"kind": "rename", "newName": "x"},
        {"dryrun": True},
        ("tasks[0].safety.dryrun", "close, macro-rm, reap, workspace-delete", "kind=rename"),
    ),
]


@pytest.mark.parametrize(("tool", "action", "safety", "fragments"), SAFETY_REFUSED)
def test_safety_refusals(
    tool: str, action: dict[str, Any], safety: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    expect_refusal(tool, one(tool, action or None, safety=safety), *fragments)


# ---- action ranges: every edge in and out -------------------------------------------------------

ACTION_EDGES_OK: list[tuple[str, dict[str, Any], str, object]] = [
    ("shell_open", {"kind": "open", "count": 1}, "count", 1),
    ("shell_open", {"kind": "open", "count": 64}, "count", 64),
    ("shell_open", {"kind": "open", "cols": 20}, "cols", 20),
    ("shell_open", {"kind": "open", "cols": 1000}, "cols", 1000),
    ("shell_open", {"kind": "open", "rows": 5}, "rows", 5),
    ("shell_open", {"kind": "open", "rows": 500}, "rows", 500),
    ("shell_open", {"kind": "open", "idleMinutes": 0}, "idle_minutes", 0),
    ("shell_open", {"kind": "open", "idleMinutes": 1440}, "idle_minutes", 1440),
    ("shell_open", {"kind": "open", "label": "x" * 32}, "label", "x" * 32),
    ("shell_open", {"kind": "open", "cwd": "~/src"}, "cwd", "~/src"),
    ("shell_open", {"kind": "open", "idleMinutes": None}, "idle_minutes", None),
    ("shell_read", {"kind": "read", "context": 0}, "context", 0),
    ("shell_read", {"kind": "read", "context": 8}, "context", 8),
    ("shell_read", {"kind": "read", "matchOffset": 0}, "match_offset", 0),
    ("shell_read", {"kind": "read", "matchOffset": 100000}, "match_offset", 100000),
    ("shell_manage", {"kind": "rename", "newName": "n" * 32}, "new_name", "n" * 32),
    ("shell_manage", {"kind": "resize", "cols": 20, "rows": 5}, "rows", 5),
    ("shell_manage", {"kind": "resize", "cols": 1000, "rows": 500}, "cols", 1000),
    ("shell_manage", {"kind": "idle", "idleMinutes": 1440}, "idle_minutes", 1440),
    ("shell_manage", {"kind": "macro-set", "name": "m" * 64, "text": "t"}, "name", "m" * 64),
    ("shell_manage", {"kind": "macro-set", "name": "m", "text": "t", "scope": "global"}, "scope", "global"),
    ("shell_manage", {"kind": "macro-history", "name": "m", "days": 1}, "days", 1),
    ("shell_manage", {"kind": "macro-history", "name": "m", "days": 3650}, "days", 3650),
    ("shell_manage", {"kind": "macro-restore", "name": "m", "at": 0}, "at", 0),
    ("shell_manage", {"kind": "workspace-save", "name": "w" * 64}, "name", "w" * 64),
    ("shell_audit", {"kind": "audit", "days": 1}, "days", 1),
    ("shell_audit", {"kind": "audit", "source": "host"}, "source", "host"),
]


@pytest.mark.parametrize(("tool", "action", "field", "value"), ACTION_EDGES_OK)
def test_action_range_edges_accepted(tool: str, action: dict[str, Any], field: str, value: object) -> None:
    assert getattr(task0(tool, action).action, field) == value


ACTION_REFUSED: list[tuple[str, Any, tuple[str, ...]]] = [
    ("shell_open", {"kind": "open", "count": 0}, ("tasks[0].action.count", "1 to 64")),
    ("shell_open", {"kind": "open", "count": 65}, ("tasks[0].action.count", "1 to 64")),
    ("shell_open", {"kind": "open", "cols": 19}, ("tasks[0].action.cols", "20 to 1000")),
    ("shell_open", {"kind": "open", "cols": 1001}, ("tasks[0].action.cols", "20 to 1000")),
    ("shell_open", {"kind": "open", "rows": 4}, ("tasks[0].action.rows", "5 to 500")),
    ("shell_open", {"kind": "open", "rows": 501}, ("tasks[0].action.rows", "5 to 500")),
    ("shell_open", {"kind": "open", "idleMinutes": -1}, ("tasks[0].action.idleMinutes", "0 to 1440")),
    ("shell_open", {"kind": "open", "idleMinutes": 1441}, ("tasks[0].action.idleMinutes", "0 to 1440")),
    ("shell_open", {"kind": "open", "label": "x" * 33}, ("tasks[0].action.label", "at most 32")),
    ("shell_open", {"kind": "open", "label": 5}, ("tasks[0].action.label", "string", "5 (a number)")),
    ("shell_open", {"kind": "open", "watch": "true"}, ("tasks[0].action.watch", "boolean")),
    ("shell_open", {"kind": "open", "from": "old"}, ("tasks[0].action.from", "not a shell id", "dsh-")),
    ("shell_open", {"kind": "open", "count": "2"}, ("tasks[0].action.count", "integer")),
    (
        "shell_open",
        {"kind": "open", "command": "ls"},
        ("unknown field(s) command", "allowed for kind=open: kind, count, cwd"),
    ),
    ("shell_run", {"kind": "run"}, ("tasks[0].action.command", "required when kind=run", "kind=steps")),
    ("shell_run", {"kind": "run", "command": "  "}, ("tasks[0].action.command", "blank")),
    ("shell_run", {"kind": "run", "command": ["ls"]}, ("tasks[0].action.command", "an array")),
    (
        "shell_run",
        {"kind": "run", "command": "ls", "mode": "last"},
        ("tasks[0].action", "unknown field(s) mode", "allowed for kind=run: kind, command", "for kind=retry"),
    ),
    ("shell_run", {"kind": "retry"}, ("tasks[0].action.mode", "required", "last, last-failed")),
    ("shell_run", {"kind": "retry", "mode": "all"}, ("tasks[0].action.mode", "last, last-failed")),
    ("shell_run", {"kind": "steps"}, ("tasks[0].action.steps", "required")),
    ("shell_run", {"kind": "steps", "steps": []}, ("tasks[0].action.steps", "1 to 50")),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "x"}] * 51},
        ("tasks[0].action.steps", "1 to 50", "51"),
    ),
    ("shell_run", {"kind": "steps", "steps": "ls"}, ("tasks[0].action.steps", "array")),
    ("shell_run", {"kind": "steps", "steps": [{}]}, ("tasks[0].action.steps[0]", "send, expect, or both")),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "a\nb"}]},
        ("tasks[0].action.steps[0].send", "one line"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "a", "wait": "idle"}]},
        ("tasks[0].action.steps[0]", "unknown field(s) wait", "label, send, expect, timeoutMs"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"expect": {"kind": "exit"}}]},
        ("tasks[0].action.steps[0].expect.kind", "idle, match, file or bell", "kind=run"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"expect": "match"}]},
        ("tasks[0].action.steps[0].expect.pattern", "required"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"expect": {"kind": "idle", "path": "x"}}]},
        ("unknown field(s) path", "allowed for expect kind=idle: kind"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"expect": {"kind": "file"}}]},
        ("steps[0].expect.path", "required"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "x", "timeoutMs": -1}]},
        ("tasks[0].action.steps[0].timeoutMs", "at least 0"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"expect": {"kind": "match", "pattern": "[a"}}]},
        ("steps[0].expect.pattern", "invalid regular expression"),
    ),
    ("shell_send", {"kind": "send"}, ("tasks[0].action.text", "required", '""')),
    ("shell_send", {"kind": "send", "text": "ls\n"}, ("tasks[0].action.text", "newline", "Enter")),
    ("shell_send", {"kind": "send", "text": "ls\r"}, ("tasks[0].action.text", "newline")),
    (
        "shell_send",
        {"kind": "send", "text": "x", "keys": "Enter"},
        ("tasks[0].action.keys", "array of tmux key names"),
    ),
    (
        "shell_send",
        {"kind": "send", "text": "x", "keys": ["Enter"] * 65},
        ("tasks[0].action.keys", "at most 64"),
    ),
    (
        "shell_send",
        {"kind": "send", "text": "x", "command": "ls"},
        ("unknown field(s) command", "for kind=send"),
    ),
    ("shell_read", {"kind": "read", "context": -1}, ("tasks[0].action.context", "at least 0")),
    ("shell_read", {"kind": "read", "matchOffset": 100001}, ("tasks[0].action.matchOffset", "0 to 100000")),
    ("shell_read", {"kind": "read", "matchOffset": -1}, ("tasks[0].action.matchOffset", "0 to 100000")),
    (
        "shell_read",
        {"kind": "read", "mode": "all"},
        ("tasks[0].action.mode", "tail, screen, history, since, diff, summary"),
    ),
    ("shell_read", {"kind": "read", "search": ""}, ("tasks[0].action.search", "empty")),
    (
        "shell_read",
        {"kind": "read", "search": "a**"},
        ("tasks[0].action.search", "invalid regular expression"),
    ),
    ("shell_read", {"kind": "read", "ifChanged": 1}, ("tasks[0].action.ifChanged", "boolean")),
    (
        "shell_read",
        {"kind": "subscribe", "mode": "tail"},
        ("unknown field(s) mode", "allowed for kind=subscribe: kind", "for kind=read"),
    ),
    (
        "shell_read",
        {"kind": "unsubscribe", "x": 1},
        ("unknown field(s) x", "allowed for kind=unsubscribe: kind"),
    ),
    ("shell_manage", {"kind": "rename"}, ("tasks[0].action.newName", "required")),
    ("shell_manage", {"kind": "rename", "newName": "n" * 33}, ("tasks[0].action.newName", "at most 32")),
    ("shell_manage", {"kind": "resize"}, ("tasks[0].action", "cols", "rows")),
    ("shell_manage", {"kind": "resize", "cols": 19}, ("tasks[0].action.cols", "20 to 1000")),
    ("shell_manage", {"kind": "resize", "rows": 501}, ("tasks[0].action.rows", "5 to 500")),
    ("shell_manage", {"kind": "idle", "idleMinutes": 1441}, ("tasks[0].action.idleMinutes", "0 to 1440")),
    (
        "shell_manage",
        {"kind": "close", "force": True},
        ("unknown field(s) force", "allowed for kind=close: kind"),
    ),
    ("shell_manage", {"kind": "respawn", "cols": 80}, ("unknown field(s) cols", "for kind=resize")),
    ("shell_manage", {"kind": "doctor", "note": 3}, ("tasks[0].action.note", "string")),
    ("shell_manage", {"kind": "macro-set", "name": "m"}, ("tasks[0].action.text", "required")),
    ("shell_manage", {"kind": "macro-set", "text": "t"}, ("tasks[0].action.name", "required")),
    (
        "shell_manage",
        {"kind": "macro-set", "name": "m" * 65, "text": "t"},
        ("tasks[0].action.name", "at most 64"),
    ),
    ("shell_manage", {"kind": "macro-set", "name": "a b", "text": "t"}, ("tasks[0].action.name", "/NAME")),
    (
        "shell_manage",
        {"kind": "macro-set", "name": "m", "text": "t", "scope": "user"},
        ("tasks[0].action.scope", "global, conversation, shell"),
    ),
    (
        "shell_manage",
        {"kind": "macro-set", "name": "m", "text": "t", "submit": "no"},
        ("tasks[0].action.submit", "boolean"),
    ),
    ("shell_manage", {"kind": "macro-rm"}, ("tasks[0].action.name", "required")),
    (
        "shell_manage",
        {"kind": "macro-history", "name": "m", "days": 0},
        ("tasks[0].action.days", "at least 1"),
    ),
    (
        "shell_manage",
        {"kind": "macro-restore", "name": "m"},
        ("tasks[0].action.at", "required", "macro-history"),
    ),
    ("shell_manage", {"kind": "macro-restore", "name": "m", "at": -1}, ("tasks[0].action.at", "epoch ms")),
    ("shell_manage", {"kind": "workspace-save"}, ("tasks[0].action.name", "required")),
    ("shell_manage", {"kind": "workspace-save", "name": "w" * 65}, ("tasks[0].action.name", "at most 64")),
    ("shell_manage", {"kind": "workspace-restore"}, ("tasks[0].action.name", "required")),
    ("shell_manage", {"kind": "workspace-delete", "name": ""}, ("tasks[0].action.name", "blank")),
    (
        "shell_manage",
        {"kind": "workspace-list", "name": "w"},
        ("unknown field(s) name", "allowed for kind=workspace-list: kind"),
    ),
    ("shell_manage", {"kind": "vault-list", "group": "g"}, ("unknown field(s) group",)),
    ("shell_manage", {"kind": "snapshot-list", "x": 1}, ("unknown field(s) x",)),
    ("shell_manage", {"kind": "macro-list", "x": 1}, ("unknown field(s) x",)),
    ("shell_manage", {"kind": "snapshot", "x": 1}, ("unknown field(s) x",)),
    ("shell_manage", {"kind": "reap", "x": 1}, ("unknown field(s) x",)),
    ("shell_audit", {"kind": "audit", "days": 0}, ("tasks[0].action.days", "at least 1")),
    ("shell_audit", {"kind": "audit", "source": "web"}, ("tasks[0].action.source", "tool, panel, host, cli")),
    ("shell_audit", {"kind": "audit", "export": "jsonl"}, ("tasks[0].action.export", "boolean")),
    # kinds
    ("shell_run", {"command": "ls"}, ("tasks[0].action.kind", "required", "run, steps, retry")),
    ("shell_run", {"kind": "read"}, ("tasks[0].action.kind", "run, steps, retry", "kind of shell_read")),
    (
        "shell_read",
        {"kind": "close"},
        ("tasks[0].action.kind", "read, subscribe, unsubscribe", "shell_manage"),
    ),
    ("shell_manage", {"kind": "delete"}, ("tasks[0].action.kind", "rename, resize", "workspace-delete")),
    ("shell_audit", {"kind": 1}, ("tasks[0].action.kind", "audit", "1 (a number)")),
    ("shell_run", "ls", ("tasks[0].action", "must be an object")),
]


@pytest.mark.parametrize(("tool", "action", "fragments"), ACTION_REFUSED)
def test_action_refusals(tool: str, action: Any, fragments: tuple[str, ...]) -> None:
    expect_refusal(tool, one(tool, action), *fragments)


# ---- call structure (§1) and the common errors (§6) ---------------------------------------------


def test_concurrency_default_clamp_and_report() -> None:
    call = parse_call("shell_run", one("shell_run"))
    assert (call.concurrency, call.concurrency_requested, call.concurrency_note) == (4, None, None)
    for given, used in ((1, 1), (8, 8), (9, 8), (1000, 8), (6.0, 6)):
        call = parse_call("shell_run", {**one("shell_run"), "concurrency": given})
        assert (call.concurrency, call.concurrency_requested) == (used, given)
    assert Call(tool="shell_run", tasks=(), concurrency=8, concurrency_requested=12).concurrency_note == (
        "concurrency 12 clamped to 8"
    )
    huge = Call(tool="shell_run", tasks=(), concurrency=8, concurrency_requested=10**300)
    assert huge.concurrency_note == "concurrency 100000000000… (301 digits) clamped to 8"


# Budgets (how long to wait, how often to poll, how many lines, how far back) are clamped into
# range and noted; every other number is refused out of range (the tables above).
CLAMPED: list[tuple[str, dict[str, Any], str, str, int]] = [
    (
        "shell_run",
        {"wait": {"timeoutMs": 90_000_000}},
        "wait.timeout_ms",
        "wait.timeoutMs 90000000",
        86_400_000,
    ),
    (
        "shell_read",
        {"wait": {"kind": "idle", "timeoutMs": 86_400_001.0}},
        "wait.timeout_ms",
        "wait.timeoutMs 86400001",
        86_400_000,
    ),
    ("shell_run", {"wait": {"pollMs": 5}}, "wait.poll_ms", "wait.pollMs 5", 20),
    ("shell_run", {"wait": {"pollMs": 0}}, "wait.poll_ms", "wait.pollMs 0", 20),
    ("shell_run", {"wait": {"pollMs": 100_001}}, "wait.poll_ms", "wait.pollMs 100001", 100_000),
    ("shell_send", {"wait": {"pollMs": 10}}, "wait.poll_ms", "wait.pollMs 10", 20),
    ("shell_run", {"output": {"lines": 5000}}, "output.lines", "output.lines 5000", 2000),
    ("shell_read", {"output": {"lines": 2001}}, "output.lines", "output.lines 2001", 2000),
    ("shell_audit", {"output": {"lines": 9999}}, "output.lines", "output.lines 9999", 2000),
]


@pytest.mark.parametrize(("tool", "blocks", "attr", "given", "used"), CLAMPED)
def test_budgets_beyond_their_range_are_clamped_and_noted(
    tool: str, blocks: dict[str, Any], attr: str, given: str, used: int
) -> None:
    call = parse_call(tool, one(tool, **blocks))
    note = f"tasks[0].{given} clamped to {used}"
    assert call.clamps == (note,) and call.notes == (note,)
    block, field = attr.split(".")
    assert getattr(getattr(call.tasks[0], block), field) == used


def test_action_budgets_are_clamped_and_noted() -> None:
    cases: list[tuple[str, dict[str, Any], str, str, int]] = [
        (
            "shell_read",
            {"kind": "read", "search": "x", "context": 20},
            "context",
            "tasks[0].action.context 20 clamped to 8",
            8,
        ),
        (
            "shell_audit",
            {"kind": "audit", "days": 5000},
            "days",
            "tasks[0].action.days 5000 clamped to 3650",
            3650,
        ),
        (
            "shell_manage",
            {"kind": "macro-history", "name": "m", "days": 4000},
            "days",
            "tasks[0].action.days 4000 clamped to 3650",
            3650,
        ),
        (
            "shell_run",
            {"kind": "steps", "steps": [{"send": "x"}, {"send": "y", "timeoutMs": 1e9}]},
            "steps",
            "tasks[0].action.steps[1].timeoutMs 1000000000 clamped to 86400000",
            86_400_000,
        ),
    ]
    for tool, action, field, note, used in cases:
        call = parse_call(tool, one(tool, action))
        assert call.clamps == (note,), (tool, action)
        value = getattr(call.tasks[0].action, field)
        assert (value[1].timeout_ms if field == "steps" else value) == used
    # Several clamps in one call are all noted, after the concurrency clamp, in task order.
    raw = one("shell_run", wait={"timeoutMs": 10**9}, output={"lines": 10**6})
    raw["tasks"].append(
        {
            "target": {"sessions": "dsh-other1"},
            "action": {"kind": "run", "command": "x"},
            "wait": {"pollMs": 1},
        }
    )
    call = parse_call("shell_run", {**raw, "concurrency": 20})
    assert call.notes == (
        "concurrency 20 clamped to 8",
        "tasks[0].wait.timeoutMs 1000000000 clamped to 86400000",
        "tasks[0].output.lines 1000000 clamped to 2000",
        "tasks[1].wait.pollMs 1 clamped to 20",
    )
    # Within range nothing is noted; a second parse starts with no notes.
    assert parse_call("shell_run", one("shell_run", wait={"timeoutMs": 86_400_000})).notes == ()


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True])
def test_concurrency_below_range_or_wrong_type(bad: object) -> None:
    expect_refusal("shell_run", {**one("shell_run"), "concurrency": bad}, "concurrency", "1 to")


def test_sixteen_tasks_ok_seventeen_refused() -> None:
    def tasks(n: int) -> dict[str, Any]:
        return {
            "tasks": [{"target": {"sessions": f"dsh-{i:06d}"}, "action": {"kind": "read"}} for i in range(n)]
        }

    call = parse_call("shell_read", tasks(16))
    assert [t.index for t in call.tasks] == list(range(16))
    expect_refusal("shell_read", tasks(17), "tasks:", "1 to 16", "17")
    expect_refusal("shell_read", {"tasks": []}, "tasks:", "1 to 16", "got 0")


COMMON_ERRORS: list[tuple[str, Any, tuple[str, ...]]] = [
    # §6 row 1: fields at the wrong level
    (
        "shell_run",
        {"tasks": [{"session": ID, "command": "ls"}]},
        (
            "tasks[0]: unknown field(s) session, command; allowed: target, action, wait, output, safety",
            "put them in { tasks: [{ target, action }] }",
        ),
    ),
    (
        "shell_run",
        {"session": ID, "command": "ls"},
        (
            "unknown field(s) session, command; allowed: tasks, concurrency",
            "put them in { tasks: [{ target, action }] }",
        ),
    ),
    (
        "shell_run",
        {"target": {"sessions": ID}, "action": {"kind": "run", "command": "ls"}},
        ("unknown field(s) target, action", "{ tasks: [{ target, action }] }"),
    ),
    # §6 row 2: another kind's fields in the action
    (
        "shell_run",
        {
            "tasks": [
                {"target": {"sessions": ID}, "action": {"kind": "retry", "mode": "last", "command": "ls"}}
            ]
        },
        ("tasks[0].action: unknown field(s) command; allowed for kind=retry: kind, mode", "for kind=run"),
    ),
    # §6 row 3: command missing
    (
        "shell_run",
        {"tasks": [{"target": {"sessions": ID}, "action": {"kind": "run"}}]},
        ("tasks[0].action.command: required when kind=run (shell_run.action.command)", "use kind=steps"),
    ),
    # §6 row 4: "*" for a write
    (
        "shell_run",
        {"tasks": [{"target": {"sessions": "*"}, "action": {"kind": "run", "command": "ls"}}]},
        ('target.sessions="*" is not allowed for writes; use explicit ids or mine',),
    ),
    (
        "shell_send",
        {"tasks": [{"target": {"sessions": "*"}, "action": {"kind": "send", "text": ""}}]},
        ('target.sessions="*" is not allowed for writes',),
    ),
    (
        "shell_manage",
        {"tasks": [{"target": {"sessions": "*"}, "action": {"kind": "close"}}]},
        ('target.sessions="*" is not allowed for writes',),
    ),
    # §6 last row: one shell twice
    (
        "shell_run",
        {
            "tasks": [
                {"target": {"sessions": ID}, "action": {"kind": "run", "command": "a"}},
                {"target": {"sessions": ID}, "action": {"kind": "run", "command": "b"}},
            ]
        },
        ("tasks[1].target.sessions", f"{ID} is also in tasks[0]", "only once per call", "split"),
    ),
    (
        "shell_read",
        {
            "tasks": [
                {"target": {"sessions": "dsh-a,dsh-b"}, "action": {"kind": "read"}},
                {"target": {"sessions": "dsh-c,dsh-b"}, "action": {"kind": "read"}},
            ]
        },
        ("dsh-b is also in tasks[0]",),
    ),
]


@pytest.mark.parametrize(("tool", "raw", "fragments"), COMMON_ERRORS)
def test_common_errors(tool: str, raw: Any, fragments: tuple[str, ...]) -> None:
    expect_refusal(tool, raw, *fragments)


def test_star_allowed_for_reads() -> None:
    for tool, action in (
        ("shell_read", {"kind": "read"}),
        ("shell_audit", {"kind": "audit"}),
        ("shell_manage", {"kind": "snapshot-list"}),
        ("shell_manage", {"kind": "workspace-save", "name": "w"}),
    ):
        assert task0(tool, action, target={"sessions": "*"}).target.mode == "*"


def test_mine_in_several_tasks_is_left_to_the_engine() -> None:
    raw = {
        "tasks": [{"action": {"kind": "read"}}, {"target": {"sessions": "mine"}, "action": {"kind": "read"}}]
    }
    assert len(parse_call("shell_read", raw).tasks) == 2


BLOCK_REFUSED: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "shell_read",
        "safety",
        ("tasks[0]: shell_read does not take the safety block", "target, action, wait, output"),
    ),
    ("shell_audit", "wait", ("shell_audit does not take the wait block", "target, action, output")),
    ("shell_audit", "safety", ("shell_audit does not take the safety block",)),
    ("shell_manage", "wait", ("shell_manage does not take the wait block", "target, action, safety")),
    ("shell_manage", "output", ("shell_manage does not take the output block",)),
    ("shell_open", "target", ("shell_open does not take the target block", "consumes action")),
    ("shell_open", "wait", ("shell_open does not take the wait block",)),
    ("shell_open", "output", ("shell_open does not take the output block",)),
    ("shell_open", "safety", ("shell_open does not take the safety block",)),
]


@pytest.mark.parametrize(("tool", "block", "fragments"), BLOCK_REFUSED)
def test_blocks_a_tool_does_not_consume(tool: str, block: str, fragments: tuple[str, ...]) -> None:
    raw = {"tasks": [{"action": DEFAULT_ACTION[tool], block: {}}]}
    expect_refusal(tool, raw, *fragments)


TARGET_REFUSED: list[tuple[Any, tuple[str, ...]]] = [
    ("dsh-ab12cd", ("tasks[0].target", "must be an object", '"sessions"')),
    ({"sessions": "ab12cd"}, ("tasks[0].target.sessions", "'ab12cd' is not a shell id", "dsh-ab12cd")),
    ({"sessions": "DSH-AB12CD"}, ("not a shell id",)),
    ({"sessions": "dsh-"}, ("not a shell id",)),
    ({"sessions": "dsh-a,"}, ("tasks[0].target.sessions", "mine, *, or comma-separated")),
    ({"sessions": "mine,dsh-a"}, ("mine and * stand alone",)),
    ({"sessions": "*,dsh-a"}, ("mine and * stand alone",)),
    ({"sessions": "dsh-a,dsh-a"}, ("dsh-a is listed twice",)),
    ({"sessions": 3}, ("tasks[0].target.sessions", "3 (a number)")),
    ({"session": ID}, ("tasks[0].target: unknown field(s) session; allowed: sessions",)),
]


@pytest.mark.parametrize(("target", "fragments"), TARGET_REFUSED)
def test_target_refusals(target: Any, fragments: tuple[str, ...]) -> None:
    expect_refusal("shell_read", one("shell_read", target=target), *fragments)


CALL_REFUSED: list[tuple[Any, tuple[str, ...]]] = [
    ({}, ("tasks: required", "{ tasks: [{ target, action }] }")),
    ({"tasks": {"action": {}}}, ("tasks: must be an array", "an object")),
    ([], ("arguments: must be an object",)),
    ({"tasks": ["read"]}, ("tasks[0]: must be an object",)),
    (
        {"tasks": [{"target": {"sessions": ID}}]},
        ("tasks[0].action: required", "action.kind", '"kind": "run"'),
    ),
    ({"tasks": [{"action": None, "target": None}]}, ("tasks[0].action: required",)),
    ({"tasks": [{"action": {"kind": "run", "command": "ls"}, "label": ""}]}, ("tasks[0].label", "blank")),
    (
        {"tasks": [{"action": {"kind": "run", "command": "ls"}, "label": "l" * 65}]},
        ("tasks[0].label", "at most 64"),
    ),
    (
        {"tasks": [{"action": {"kind": "run", "command": "ls"}}, {"action": {"kind": "run"}}]},
        ("tasks[1].action.command",),
    ),
]


@pytest.mark.parametrize(("raw", "fragments"), CALL_REFUSED)
def test_call_refusals(raw: Any, fragments: tuple[str, ...]) -> None:
    expect_refusal("shell_run", raw, *fragments)


def test_unknown_tool() -> None:
    with pytest.raises(UsageError, match="unknown tool 'shell_exec'"):
        parse_call("shell_exec", one("shell_run"))


def test_null_means_omitted() -> None:
    task = task0("shell_run", wait={"kind": None, "timeoutMs": None}, output=None)
    assert task.wait == Wait() and task.output == Output()


def test_per_tool_wrappers_return_the_tool() -> None:
    assert sa.parse_open(one("shell_open")).tool == "shell_open"
    assert sa.parse_run(one("shell_run")).tool == "shell_run"
    assert sa.parse_send(one("shell_send")).tool == "shell_send"
    assert sa.parse_read(one("shell_read")).tool == "shell_read"
    assert sa.parse_manage(one("shell_manage")).tool == "shell_manage"
    assert sa.parse_audit(one("shell_audit")).tool == "shell_audit"


def test_values_are_frozen() -> None:
    task = task0("shell_run")
    with pytest.raises(AttributeError):
        task.label = "x"  # type: ignore[misc]


# ---- shell_state --------------------------------------------------------------------------------


def test_state_defaults_and_every_filter() -> None:
    assert parse_state({}) == StateQuery() == parse_state(None)
    query = parse_state(
        {
            "scope": "*",
            "sessions": "dsh-a,dsh-b",
            "label": "web",
            "fg": "vim",
            "cwd": "/repo",
            "state": "idle, user-busy,ai-busy",
            "owner": "panel",
            "withGit": True,
            "verbose": True,
        }
    )
    assert query == StateQuery(
        scope="*",
        sessions=("dsh-a", "dsh-b"),
        label="web",
        fg="vim",
        cwd="/repo",
        states=("idle", "user-busy", "ai-busy"),
        owner="panel",
        with_git=True,
        verbose=True,
    )


@pytest.mark.parametrize("state", sa.STATE_NAMES)
def test_every_state_value(state: str) -> None:
    assert parse_state({"state": state}).states == (state,)


@pytest.mark.parametrize("owner", ["mine", "others", "panel", "unknown"])
def test_every_owner_value(owner: str) -> None:
    assert parse_state({"owner": owner}).owner == owner


STATE_REFUSED: list[tuple[Any, tuple[str, ...]]] = [
    ({"scope": "all"}, ("scope", "mine, *")),
    ({"state": "sleeping"}, ("state", "'sleeping' is not a state", "idle, busy, user-busy")),
    ({"owner": "me"}, ("owner", "mine, others, panel, unknown")),
    ({"sessions": "x"}, ("sessions", "not a shell id")),
    ({"withGit": "yes"}, ("withGit", "boolean")),
    ({"tasks": []}, ("shell_state takes flat filters", "scope, sessions")),
    (
        {"target": {"sessions": ID}},
        ("unknown field(s) target", "allowed: scope, sessions, label, fg, cwd, state"),
    ),
    ("idle", ("arguments: must be an object",)),
]


@pytest.mark.parametrize(("raw", "fragments"), STATE_REFUSED)
def test_state_refusals(raw: Any, fragments: tuple[str, ...]) -> None:
    with pytest.raises(UsageError) as info:
        parse_state(raw)
    for fragment in fragments:
        assert fragment in str(info.value)


# ---- schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", [*sa.TOOLS, "shell_state"])
def test_schema_is_2020_12_and_closed(tool: str) -> None:
    schema = sa.input_schema(tool)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    schema["x"] = 1
    assert "x" not in sa.input_schema(tool)


@pytest.mark.parametrize("tool", sa.TOOLS)
@pytest.mark.parametrize("confining", [False, True], ids=["unconfined", "confining"])
def test_schema_lists_exactly_the_tools_blocks_and_kinds(tool: ToolName, confining: bool) -> None:
    modes = ("use_default", "allow_network") if confining else None
    task = sa.input_schema(tool, sandbox_modes=modes)["properties"]["tasks"]["items"]
    assert set(task["properties"]) == {*sa.BLOCKS[tool], "label"}
    kinds = [variant["properties"]["kind"]["const"] for variant in task["properties"]["action"]["oneOf"]]
    assert kinds == list(KINDS[tool])
    for variant in task["properties"]["action"]["oneOf"]:
        allowed, _ = KINDS[tool][variant["properties"]["kind"]["const"]]
        # sandbox_permissions and justification exist only where the deployment confines
        only_confined = set() if confining else set(CONFINED_OPEN_FIELDS)
        assert set(variant["properties"]) == {"kind", *allowed} - only_confined
        if confining and variant["properties"]["kind"]["const"] == "open":
            assert variant["properties"]["sandbox_permissions"]["enum"] == list(modes or ())


def test_schema_wait_per_tool() -> None:
    def wait(tool: str) -> dict[str, Any]:
        result: dict[str, Any] = sa.input_schema(tool)["properties"]["tasks"]["items"]["properties"]["wait"]
        return result

    assert wait("shell_run")["properties"]["kind"]["enum"] == list(WAIT_KINDS["shell_run"])
    assert "pollMs" not in wait("shell_read")["properties"] and "runId" in wait("shell_read")["properties"]
    assert set(wait("shell_send")["properties"]) == {"pollMs"}


def test_regex_helpers_are_exported() -> None:
    assert sa.js_regex_to_python(r"(?<y>\d)") == "(?P<y>[0-9])"
    assert isinstance(sa.compile_js_regex("a", field="f"), re.Pattern)


COMBINATIONS_REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    (
        "shell_open",
        {"kind": "open", "from": "dsh-old123", "count": 2},
        {},
        ("tasks[0].action.count", "count must be 1"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "x"}]},
        {"wait": {"kind": "exit"}},
        ("tasks[0].wait.kind", "steps[i].expect", "kind=run"),
    ),
    (
        "shell_run",
        {"kind": "steps", "steps": [{"send": "x"}]},
        {"wait": {"kind": "none"}},
        ("tasks[0].wait.kind",),
    ),
    (
        "shell_read",
        {"kind": "subscribe"},
        {"wait": {"kind": "idle"}},
        ("tasks[0].wait", "kind=subscribe does not wait"),
    ),
    (
        "shell_read",
        {"kind": "unsubscribe"},
        {"wait": {}},
        ("tasks[0].wait", "kind=unsubscribe does not wait"),
    ),
]


@pytest.mark.parametrize(("tool", "action", "blocks", "fragments"), COMBINATIONS_REFUSED)
def test_combinations_refused(
    tool: str, action: dict[str, Any], blocks: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    expect_refusal(tool, one(tool, action, **blocks), *fragments)


def test_steps_take_the_task_timeout() -> None:
    task = task0(
        "shell_run", {"kind": "steps", "steps": [{"send": "x"}]}, wait={"timeoutMs": 5000, "pollMs": 50}
    )
    assert task.wait == Wait(timeout_ms=5000, poll_ms=50)


# Every input the validator accepts in this file also validates against the published schema.
ACCEPTED_CALLS: list[tuple[str, dict[str, Any]]] = [
    *((tool, one(tool, action)) for tool, action, _ in KIND_DEFAULTS),
    # (null means "omitted" to the validator; the schema does not advertise it)
    *((tool, one(tool, action)) for tool, action, _, _ in ACTION_EDGES_OK if None not in action.values()),
    *((tool, one(tool, wait=wait)) for tool, wait, _ in WAIT_OK),
    (
        "shell_run",
        {**one("shell_run", output={"lines": 0, "showing": "diff", "structured": False}), "concurrency": 12},
    ),
    (
        "shell_run",
        one("shell_run", safety={"bypassGuard": True, "reason": "r", "lock": "ignore", "force": True}),
    ),
    (
        "shell_run",
        one("shell_run", {"kind": "steps", "steps": [{"send": "a", "expect": "idle", "timeoutMs": 5}]}),
    ),
    ("shell_send", one("shell_send", {"kind": "send", "text": "", "keys": ["C-c"], "preKeys": ["Escape"]})),
    ("shell_manage", one("shell_manage", {"kind": "close"}, safety={"dryrun": True})),
]


def test_schemas_are_valid_2020_12() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for tool in (*sa.TOOLS, "shell_state"):
        jsonschema.Draft202012Validator.check_schema(sa.input_schema(tool))


@pytest.mark.parametrize(("tool", "raw"), ACCEPTED_CALLS)
def test_accepted_input_validates_against_the_schema(tool: str, raw: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    parse_call(tool, raw)
    jsonschema.Draft202012Validator(sa.input_schema(tool)).validate(raw)


def test_state_input_validates_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    raw = {"scope": "*", "sessions": "dsh-a", "state": "idle,busy", "owner": "others", "withGit": True}
    parse_state(raw)
    jsonschema.Draft202012Validator(sa.input_schema("shell_state")).validate(raw)


def test_mutated_inputs_never_crash() -> None:
    """Any JSON value in any position gives a value or a UsageError, never another exception."""
    import copy
    import random

    rng = random.Random(20261130)
    junk: list[Any] = [
        None,
        True,
        0,
        -1,
        1.5,
        10**12,
        "",
        " ",
        "x",
        "dsh-a",
        "*",
        [],
        ["Enter"],
        {},
        {"kind": "idle"},
    ]

    def leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        found = [path]
        if isinstance(node, dict):
            for key, value in node.items():
                found += leaves(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                found += leaves(value, (*path, i))
        return found

    outcomes = {"accepted": 0, "refused": 0}
    for tool, raw in ACCEPTED_CALLS:
        for _ in range(12):
            mutated = copy.deepcopy(raw)
            path = rng.choice(leaves(mutated)[1:])
            parent = mutated
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = copy.deepcopy(rng.choice(junk))
            try:
                parse_call(tool, mutated)
                outcomes["accepted"] += 1
            except UsageError:
                outcomes["refused"] += 1
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0


def test_history_before_is_a_log_offset_for_mode_history_only() -> None:
    action = task0("shell_read", {"kind": "read", "mode": "history", "before": 1234.0}).action
    assert isinstance(action, ReadAction) and action.before == 1234
    expect_refusal(
        "shell_read", one("shell_read", {"kind": "read", "before": 5}), "tasks[0].action.before", "mode=tail"
    )
    expect_refusal(
        "shell_read",
        one("shell_read", {"kind": "read", "mode": "history", "search": "x", "before": 5}),
        "tasks[0].action.before",
        "search",
    )
    expect_refusal(
        "shell_read",
        one("shell_read", {"kind": "read", "mode": "history", "before": -1}),
        "action.before",
        "0 to",
    )


def _integer_paths(schema: Any, path: str = "") -> list[str]:
    """Every integer field of a tool's input schema, as ``tasks[].action[kind].field`` paths."""
    if not isinstance(schema, dict):
        return []
    found = [path] if schema.get("type") == "integer" else []
    for name, sub in schema.get("properties", {}).items():
        found += _integer_paths(sub, f"{path}.{name}" if path else name)
    for branch in (*schema.get("oneOf", ()), *schema.get("anyOf", ())):
        kind = branch.get("properties", {}).get("kind", {}).get("const") if isinstance(branch, dict) else None
        found += _integer_paths(branch, f"{path}[{kind}]" if kind else path)
    if "items" in schema:
        found += _integer_paths(schema["items"], path + "[]")
    return found


# One valid task per integer field (as ``path`` in the schema), the field given as 5.0, and where
# the parsed value lives in the task. A new integer field without a row here fails the test below.
_INTEGER_FIELDS: list[tuple[str, str, dict[str, Any], str]] = [
    ("shell_open", "action[open].count", {"action": {"kind": "open", "count": 5.0}}, "action.count"),
    ("shell_open", "action[open].cols", {"action": {"kind": "open", "cols": 50.0}}, "action.cols"),
    ("shell_open", "action[open].rows", {"action": {"kind": "open", "rows": 5.0}}, "action.rows"),
    (
        "shell_open",
        "action[open].idleMinutes",
        {"action": {"kind": "open", "idleMinutes": 5.0}},
        "action.idle_minutes",
    ),
    (
        "shell_run",
        "action[steps].steps[].timeoutMs",
        {"action": {"kind": "steps", "steps": [{"send": "x", "timeoutMs": 5.0}]}},
        "action.steps.0.timeout_ms",
    ),
    ("shell_run", "wait.timeoutMs", {"wait": {"timeoutMs": 5.0}}, "wait.timeout_ms"),
    ("shell_run", "wait.pollMs", {"wait": {"pollMs": 50.0}}, "wait.poll_ms"),
    ("shell_run", "wait.code", {"wait": {"kind": "exit", "code": 5.0}}, "wait.code"),
    ("shell_run", "output.lines", {"output": {"lines": 5.0}}, "output.lines"),
    ("shell_send", "wait.pollMs", {"wait": {"pollMs": 50.0}}, "wait.poll_ms"),
    ("shell_send", "output.lines", {"output": {"lines": 5.0}}, "output.lines"),
    ("shell_read", "action[read].context", {"action": {"kind": "read", "context": 5.0}}, "action.context"),
    (
        "shell_read",
        "action[read].matchOffset",
        {"action": {"kind": "read", "matchOffset": 5.0}},
        "action.match_offset",
    ),
    (
        "shell_read",
        "action[read].before",
        {"action": {"kind": "read", "mode": "history", "before": 5.0}},
        "action.before",
    ),
    ("shell_read", "wait.timeoutMs", {"wait": {"timeoutMs": 5.0}}, "wait.timeout_ms"),
    ("shell_read", "wait.code", {"wait": {"kind": "exit", "code": 5.0}}, "wait.code"),
    ("shell_read", "output.lines", {"output": {"lines": 5.0}}, "output.lines"),
    ("shell_manage", "action[resize].cols", {"action": {"kind": "resize", "cols": 50.0}}, "action.cols"),
    ("shell_manage", "action[resize].rows", {"action": {"kind": "resize", "rows": 5.0}}, "action.rows"),
    (
        "shell_manage",
        "action[idle].idleMinutes",
        {"action": {"kind": "idle", "idleMinutes": 5.0}},
        "action.idle_minutes",
    ),
    (
        "shell_manage",
        "action[macro-history].days",
        {"action": {"kind": "macro-history", "name": "m", "days": 5.0}},
        "action.days",
    ),
    (
        "shell_manage",
        "action[macro-restore].at",
        {"action": {"kind": "macro-restore", "name": "m", "at": 5.0}},
        "action.at",
    ),
    ("shell_audit", "action[audit].days", {"action": {"kind": "audit", "days": 5.0}}, "action.days"),
    ("shell_audit", "output.lines", {"output": {"lines": 5.0}}, "output.lines"),
]


def _value_at(task: object, where: str) -> object:
    for part in where.split("."):
        task = task[int(part)] if part.isdigit() else getattr(task, part)  # type: ignore[index]
    return task


@pytest.mark.parametrize("tool", [*sa.TOOLS, "shell_state"])
def test_every_integer_field_is_listed(tool: str) -> None:
    paths = {p.removeprefix("tasks[].") for p in _integer_paths(sa.input_schema(tool))} - {"concurrency"}
    assert paths == {path for t, path, _, _ in _INTEGER_FIELDS if t == tool}


@pytest.mark.parametrize(("tool", "path", "blocks", "where"), _INTEGER_FIELDS)
def test_every_integer_field_takes_an_integral_float_and_refuses_a_fraction(
    tool: str, path: str, blocks: dict[str, Any], where: str
) -> None:
    blocks = dict(blocks)
    action = blocks.pop("action", None)
    task = task0(tool, action, **blocks)
    value = _value_at(task, where)
    assert value in (5, 50) and isinstance(value, int), (path, value)
    fraction = json.loads(json.dumps({"action": action, **blocks}).replace(".0", ".5"))
    expect_refusal(tool, one(tool, fraction.pop("action"), **fraction), path.rsplit(".", 1)[1], ".5")
    assert parse_call(tool, {**one(tool), "concurrency": 5.0}).concurrency == 5
