"""What the persistent-shell operations take: targets, waits, output shapes, safety and actions.

Invariant: a value of any class here is already valid — every default filled in, every range
checked, every field meaningful for its kind. Operations never re-validate; the tools layer
(``tether.tools.shells.args``) is the producer for model calls, and the panel and CLI reach the
operations through the same tools. Field names are the snake_case form of the wire names
(``timeoutMs`` → ``timeout_ms``; ``from`` → ``from_id``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

ToolName: TypeAlias = Literal[
    "shell_open", "shell_run", "shell_send", "shell_read", "shell_manage", "shell_audit"
]
TargetMode: TypeAlias = Literal["mine", "*", "ids"]
WaitKind: TypeAlias = Literal["none", "idle", "bell", "match", "exit", "file", "noproc", "cpu", "foreground"]
ExpectKind: TypeAlias = Literal["idle", "match", "file", "bell"]
Showing: TypeAlias = Literal["since", "tail", "screen", "diff", "summary"]
ReadMode: TypeAlias = Literal["tail", "screen", "history", "since", "diff", "summary"]
LockMode: TypeAlias = Literal["require", "ignore"]
RetryMode: TypeAlias = Literal["last", "last-failed"]
MacroScope: TypeAlias = Literal["global", "conversation", "shell"]
AuditSource: TypeAlias = Literal["tool", "panel", "host", "cli"]
StateName: TypeAlias = Literal["idle", "busy", "user-busy", "ai-busy", "locked", "unlocked", "attached"]
Owner: TypeAlias = Literal["mine", "others", "panel", "unknown"]

MAX_TASKS = 16
MAX_CONCURRENCY = 8
DEFAULT_CONCURRENCY = 4
MAX_OUTPUT_LINES = 2000
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_POLL_MS = 150


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Which shells a task addresses. ``ids`` is non-empty exactly when ``mode == "ids"``."""

    mode: TargetMode = "mine"
    ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """A wait condition. Only the fields of ``kind`` are set; the others stay ``None``.

    ``regex`` is ``pattern`` (JS dialect) translated and compiled for Python ``re``. For
    ``shell_send`` the kind is always ``idle`` (the screen settling) and only ``poll_ms`` is the
    caller's; ``timeout_ms`` stays the default.
    """

    kind: WaitKind = "idle"
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    poll_ms: int = DEFAULT_POLL_MS
    code: int | None = None
    run_id: str | None = None
    pattern: str | None = None
    regex: re.Pattern[str] | None = None
    path: str | None = None
    proc: str | None = None
    threshold: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """How much and which shape of output to return (``showing``/``structured``: shell_run only)."""

    lines: int = 20
    showing: Showing = "since"
    structured: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Safety:
    """Guard bypass, dry run, lock policy, audit reason. ``bypass_guard`` implies a non-blank reason."""

    bypass_guard: bool = False
    dryrun: bool = False
    lock: LockMode = "require"
    reason: str | None = None
    force: bool = False


# ---- shell_open ---------------------------------------------------------------------------------

DEFAULT_OPEN_COLS = 120
DEFAULT_OPEN_ROWS = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAction:
    """``idle_minutes=None`` means "follow the global setting"; 0 means never close.
    ``sandbox_permissions`` + ``justification``: a wider sandbox for the new shells (only where
    the deployment confines)."""

    kind: Literal["open"] = "open"
    count: int = 1
    cwd: str | None = None
    label: str | None = None
    # Not given: ``DEFAULT_OPEN_COLS`` x ``DEFAULT_OPEN_ROWS``, or with ``from`` the snapshot's size.
    cols: int | None = None
    rows: int | None = None
    idle_minutes: int | None = None
    watch: bool = False
    from_id: str | None = None
    sandbox_permissions: str | None = None
    justification: str | None = None
    host: str | None = None  # a configured host name; None = local (or, for ``from``, the old shell's)


# ---- shell_run ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAction:
    kind: Literal["run"] = "run"
    command: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepExpect:
    """What a step waits for after its ``send``: idle, bell, match (regex) or file (path)."""

    kind: ExpectKind = "idle"
    pattern: str | None = None
    regex: re.Pattern[str] | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One step: ``send`` (Enter is pressed after it), then ``expect``. At least one is set.

    ``timeout_ms=None`` means the task's ``wait.timeout_ms``.
    """

    label: str | None = None
    send: str | None = None
    expect: StepExpect | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsAction:
    kind: Literal["steps"] = "steps"
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryAction:
    kind: Literal["retry"] = "retry"
    mode: RetryMode


# ---- shell_send ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAction:
    """``text`` holds no newline; ``keys``/``pre_keys`` are tmux key names (``C-c``, ``Enter``)."""

    kind: Literal["send"] = "send"
    text: str
    keys: tuple[str, ...] = ()
    pre_keys: tuple[str, ...] = ()


# ---- shell_read ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadAction:
    """With ``search`` set, ``mode`` is ignored and ``regex`` holds the compiled search.

    ``before`` (mode=history only) is the log offset a history page returned: read the page that
    ends there (None: the newest page).
    """

    kind: Literal["read"] = "read"
    search: str | None = None
    regex: re.Pattern[str] | None = None
    context: int = 0
    match_offset: int = 0
    mode: ReadMode = "tail"
    if_changed: bool = False
    before: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribeAction:
    kind: Literal["subscribe"] = "subscribe"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsubscribeAction:
    kind: Literal["unsubscribe"] = "unsubscribe"


# ---- shell_manage -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RenameAction:
    kind: Literal["rename"] = "rename"
    new_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeAction:
    """At least one of ``cols``/``rows`` is set; ``None`` keeps the current size."""

    kind: Literal["resize"] = "resize"
    cols: int | None = None
    rows: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RespawnAction:
    kind: Literal["respawn"] = "respawn"


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseAction:
    kind: Literal["close"] = "close"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReapAction:
    kind: Literal["reap"] = "reap"


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleAction:
    kind: Literal["idle"] = "idle"
    idle_minutes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotAction:
    kind: Literal["snapshot"] = "snapshot"


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotListAction:
    kind: Literal["snapshot-list"] = "snapshot-list"


@dataclass(frozen=True, slots=True, kw_only=True)
class DoctorAction:
    kind: Literal["doctor"] = "doctor"
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroSetAction:
    kind: Literal["macro-set"] = "macro-set"
    name: str
    text: str
    scope: MacroScope = "conversation"
    submit: bool = True
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroRmAction:
    kind: Literal["macro-rm"] = "macro-rm"
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroListAction:
    kind: Literal["macro-list"] = "macro-list"


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultListAction:
    kind: Literal["vault-list"] = "vault-list"


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroHistoryAction:
    kind: Literal["macro-history"] = "macro-history"
    name: str
    days: int = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroRestoreAction:
    """``at`` is an epoch timestamp in milliseconds, as listed by macro-history."""

    kind: Literal["macro-restore"] = "macro-restore"
    name: str
    at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceSaveAction:
    kind: Literal["workspace-save"] = "workspace-save"
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceListAction:
    kind: Literal["workspace-list"] = "workspace-list"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceRestoreAction:
    kind: Literal["workspace-restore"] = "workspace-restore"
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceDeleteAction:
    kind: Literal["workspace-delete"] = "workspace-delete"
    name: str


# ---- shell_audit --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditAction:
    kind: Literal["audit"] = "audit"
    actor: str | None = None
    source: AuditSource | None = None
    days: int = 1
    export: bool = False


RunToolAction: TypeAlias = RunAction | StepsAction | RetryAction
ReadToolAction: TypeAlias = ReadAction | SubscribeAction | UnsubscribeAction
ManageAction: TypeAlias = (
    RenameAction
    | ResizeAction
    | RespawnAction
    | CloseAction
    | ReapAction
    | IdleAction
    | SnapshotAction
    | SnapshotListAction
    | DoctorAction
    | MacroSetAction
    | MacroRmAction
    | MacroListAction
    | VaultListAction
    | MacroHistoryAction
    | MacroRestoreAction
    | WorkspaceSaveAction
    | WorkspaceListAction
    | WorkspaceRestoreAction
    | WorkspaceDeleteAction
)
Action: TypeAlias = OpenAction | RunToolAction | SendAction | ReadToolAction | ManageAction | AuditAction


@dataclass(frozen=True, slots=True, kw_only=True)
class StateQuery:
    """``shell_state`` filters. ``states`` is a union (any of them matches); empty = no filter."""

    scope: Literal["mine", "*"] = "mine"
    sessions: tuple[str, ...] = ()
    label: str | None = None
    fg: str | None = None
    cwd: str | None = None
    states: tuple[StateName, ...] = ()
    owner: Owner | None = None
    host: str | None = None
    with_git: bool = False
    verbose: bool = False
