"""The validated argument values of the seven persistent-shell tools (spec 003).

Invariant: a value of any class here is already valid — every default filled in, every range
checked, every field meaningful for its tool and kind. Handlers never re-validate and never look at
the raw JSON; ``parse`` is the only producer. Field names are the snake_case form
of the wire names (``timeoutMs`` → ``timeout_ms``; ``from`` → ``from_id``).

Shape of one call::

    Call[A]                     tool, tasks, concurrency (clamped 1..8), concurrency_requested
    └── Task[A]                 index, label, target, action: A, wait, output, safety
        ├── Target              mode mine | * | ids, ids
        ├── action              one dataclass per action.kind (OpenAction, RunAction, …)
        ├── Wait | None         kind + its own parameters (None: the tool/task has no wait)
        ├── Output              lines, showing, structured
        └── Safety              bypass_guard, dryrun, lock, reason, force

``shell_state`` takes flat filters and parses to ``StateQuery``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tether.shells import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_MS,
    DEFAULT_TIMEOUT_MS,
    MAX_CONCURRENCY,
    MAX_OUTPUT_LINES,
    MAX_TASKS,
    Action,
    AuditAction,
    AuditSource,
    CloseAction,
    DoctorAction,
    ExpectKind,
    IdleAction,
    LockMode,
    MacroHistoryAction,
    MacroListAction,
    MacroRestoreAction,
    MacroRmAction,
    MacroScope,
    MacroSetAction,
    ManageAction,
    OpenAction,
    Output,
    Owner,
    ReadAction,
    ReadMode,
    ReadToolAction,
    ReapAction,
    RenameAction,
    ResizeAction,
    RespawnAction,
    RetryAction,
    RetryMode,
    RunAction,
    RunToolAction,
    Safety,
    SendAction,
    Showing,
    SnapshotAction,
    SnapshotListAction,
    StateName,
    StateQuery,
    Step,
    StepExpect,
    StepsAction,
    SubscribeAction,
    Target,
    TargetMode,
    ToolName,
    UnsubscribeAction,
    VaultListAction,
    Wait,
    WaitKind,
    WorkspaceDeleteAction,
    WorkspaceListAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.tools.arguments import shown

A = TypeVar("A", bound=Action, covariant=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(Generic[A]):
    """One task of a call. ``index`` is its position in ``tasks`` (for ``tasks[i]`` in messages).

    ``wait`` is ``None`` for tools without a wait block (open, manage, audit) and for a
    ``shell_read`` task that gave none (read at once); shell_run always has one (default idle).
    ``label`` names the task's block in the result (not the shell's label).
    """

    index: int
    label: str | None = None
    target: Target = field(default_factory=Target)
    action: A
    wait: Wait | None = None
    output: Output = field(default_factory=Output)
    safety: Safety = field(default_factory=Safety)


@dataclass(frozen=True, slots=True, kw_only=True)
class Call(Generic[A]):
    """A whole validated call. ``concurrency`` is the value to use (clamped to 1..8);
    ``concurrency_requested`` is what the caller sent (``None`` if omitted), so a handler can
    report a clamp via ``concurrency_note``; ``clamps`` notes the other budgets clamped into range.
    ``notes`` is all of them, as a result reports them.
    """

    tool: ToolName
    tasks: tuple[Task[A], ...]
    concurrency: int = DEFAULT_CONCURRENCY
    concurrency_requested: int | None = None
    clamps: tuple[str, ...] = ()  # "tasks[0].wait.timeoutMs 90000000 clamped to 86400000", …

    @property
    def concurrency_note(self) -> str | None:
        """``"concurrency 12 clamped to 8"`` when the caller's value was clamped, else ``None``."""
        requested = self.concurrency_requested
        if requested is None or requested == self.concurrency:
            return None
        return f"concurrency {shown(requested)} clamped to {self.concurrency}"

    @property
    def notes(self) -> tuple[str, ...]:
        """Every value of the call that was clamped into range, for the result to report."""
        head = self.concurrency_note
        return ((head,) if head else ()) + self.clamps


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_POLL_MS",
    "DEFAULT_TIMEOUT_MS",
    "MAX_CONCURRENCY",
    "MAX_OUTPUT_LINES",
    "MAX_TASKS",
    "A",
    "Action",
    "AuditAction",
    "AuditSource",
    "Call",
    "CloseAction",
    "DoctorAction",
    "ExpectKind",
    "IdleAction",
    "LockMode",
    "MacroHistoryAction",
    "MacroListAction",
    "MacroRestoreAction",
    "MacroRmAction",
    "MacroScope",
    "MacroSetAction",
    "ManageAction",
    "OpenAction",
    "Output",
    "Owner",
    "ReadAction",
    "ReadMode",
    "ReadToolAction",
    "ReapAction",
    "RenameAction",
    "ResizeAction",
    "RespawnAction",
    "RetryAction",
    "RetryMode",
    "RunAction",
    "RunToolAction",
    "Safety",
    "SendAction",
    "Showing",
    "SnapshotAction",
    "SnapshotListAction",
    "StateName",
    "StateQuery",
    "Step",
    "StepExpect",
    "StepsAction",
    "SubscribeAction",
    "Target",
    "TargetMode",
    "Task",
    "ToolName",
    "UnsubscribeAction",
    "VaultListAction",
    "Wait",
    "WaitKind",
    "WorkspaceDeleteAction",
    "WorkspaceListAction",
    "WorkspaceRestoreAction",
    "WorkspaceSaveAction",
]
