"""tether.shells — persistent interactive shells: the shell-host seam and its operations.

The face (everything a layer above may use; nothing reaches past it)::

    Shells                       the shells of one TETHER_HOME in this process (``Shells.get``)
    ShellHost, LocalHost         the seam: one tmux server and what tether needs of it
    Confinement, sandbox_of      a shell's sandbox, as its record carries it; what it may
                                 write and reach, in one line
    SshHost, HostError,          a host on another machine (OpenSSH), and what it raises
    ConnectionLost
    operations                   open_shell · revive · run · steps · retry · send · read ·
                                 shell_state_rows · manage_home · shell_kind · resolve_target ·
                                 check_capacity · follow / position · screen_text ·
                                 sweep_once (idle closes and retention, as a server's sweep) ·
                                 keep_retention (a server's retention of closed shells)
    values                       requests (Wait, Output, Safety, actions, Target, StateQuery),
                                 Outcome, ShellRow, HostDown, Done, Write
    safety                       SafetyPolicy, SessionHooks, WriteIntent, WriteDecision,
                                 GuardBlockedError, call notes (collecting), Guard
    ids                          is_shell_id, check_shell_id
    people's terminals           session_exists · shell_ended · attach_argv · prepare_attach · first_paint ·
                                 terminal_clients · terminal_ending · window_size · restore_size ·
                                 mark_user_input · user_input_stamp · note_enter
    exports                      command_output (a log range as text) · asciicast (a recording)

Invariant: tools, the panel and the CLI translate requests into these calls and outcomes into
results; shell state (``maxSessions``, runs in flight, busy/idle/ai-busy, read positions) is
decided here only.
"""

from __future__ import annotations

from tether.shells.domain import Shells
from tether.shells.exports import Recording, asciicast, command_output
from tether.shells.guard import Guard
from tether.shells.host import ShellHost
from tether.shells.hosts import Confinement, ConnectionLost, HostError, HostUnsuitable, LocalHost, SshHost
from tether.shells.idle import sweep_once
from tether.shells.ids import check_shell_id, is_shell_id
from tether.shells.lifecycle import open_shell
from tether.shells.manage import (
    NO_TARGET_KINDS,
    NOT_READY,
    SHELL_KINDS,
    Done,
    manage_home,
    revive,
    shell_kind,
)
from tether.shells.outcomes import Outcome
from tether.shells.people import (
    attach_argv,
    first_paint,
    mark_user_input,
    note_enter,
    prepare_attach,
    restore_size,
    session_exists,
    shell_ended,
    terminal_clients,
    terminal_ending,
    user_input_stamp,
    window_size,
)
from tether.shells.reads import read
from tether.shells.records import Records, ShellRecord
from tether.shells.requests import (
    DEFAULT_CONCURRENCY,
    DEFAULT_OPEN_COLS,
    DEFAULT_OPEN_ROWS,
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
from tether.shells.retention import keep as keep_retention
from tether.shells.runs import retry, run
from tether.shells.safety.call_notes import CallNotes, collecting
from tether.shells.safety.hooks import SessionHooks, WriteDecision, WriteIntent
from tether.shells.safety.policy import GuardBlockedError, SafetyPolicy
from tether.shells.sends import send
from tether.shells.state import HostDown, ShellRow, sandbox_of
from tether.shells.state import state as shell_state_rows
from tether.shells.steps import steps
from tether.shells.targets import check_capacity, resolve_target
from tether.shells.timeline import TimelineEntry, timeline
from tether.shells.vault.mask import SecretMasker
from tether.shells.vault.redaction import SecretRedactor
from tether.shells.views import budget, fit, screen_lines
from tether.shells.watch import follow, position
from tether.shells.writes import Write


async def screen_text(shells: Shells, shell_id: str) -> str:
    """The shell's visible screen as text, vault values masked."""
    host, pane = await shells.pane(shell_id, output=False)
    return "\n".join(await screen_lines(shells, host, pane))


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_OPEN_COLS",
    "DEFAULT_OPEN_ROWS",
    "DEFAULT_POLL_MS",
    "DEFAULT_TIMEOUT_MS",
    "MAX_CONCURRENCY",
    "MAX_OUTPUT_LINES",
    "MAX_TASKS",
    "NOT_READY",
    "NO_TARGET_KINDS",
    "SHELL_KINDS",
    "Action",
    "AuditAction",
    "AuditSource",
    "CallNotes",
    "CloseAction",
    "Confinement",
    "ConnectionLost",
    "DoctorAction",
    "Done",
    "ExpectKind",
    "Guard",
    "GuardBlockedError",
    "HostDown",
    "HostError",
    "HostUnsuitable",
    "IdleAction",
    "LocalHost",
    "LockMode",
    "MacroHistoryAction",
    "MacroListAction",
    "MacroRestoreAction",
    "MacroRmAction",
    "MacroScope",
    "MacroSetAction",
    "ManageAction",
    "OpenAction",
    "Outcome",
    "Output",
    "Owner",
    "ReadAction",
    "ReadMode",
    "ReadToolAction",
    "ReapAction",
    "Recording",
    "Records",
    "RenameAction",
    "ResizeAction",
    "RespawnAction",
    "RetryAction",
    "RetryMode",
    "RunAction",
    "RunToolAction",
    "Safety",
    "SafetyPolicy",
    "SecretMasker",
    "SecretRedactor",
    "SendAction",
    "SessionHooks",
    "ShellHost",
    "ShellRecord",
    "ShellRow",
    "Shells",
    "Showing",
    "SnapshotAction",
    "SnapshotListAction",
    "SshHost",
    "StateName",
    "StateQuery",
    "Step",
    "StepExpect",
    "StepsAction",
    "SubscribeAction",
    "Target",
    "TargetMode",
    "TimelineEntry",
    "ToolName",
    "UnsubscribeAction",
    "VaultListAction",
    "Wait",
    "WaitKind",
    "WorkspaceDeleteAction",
    "WorkspaceListAction",
    "WorkspaceRestoreAction",
    "WorkspaceSaveAction",
    "Write",
    "WriteDecision",
    "WriteIntent",
    "asciicast",
    "attach_argv",
    "budget",
    "check_capacity",
    "check_shell_id",
    "collecting",
    "command_output",
    "first_paint",
    "fit",
    "follow",
    "is_shell_id",
    "keep_retention",
    "manage_home",
    "mark_user_input",
    "note_enter",
    "open_shell",
    "position",
    "prepare_attach",
    "read",
    "resolve_target",
    "restore_size",
    "retry",
    "revive",
    "run",
    "sandbox_of",
    "screen_text",
    "send",
    "session_exists",
    "shell_ended",
    "shell_kind",
    "shell_state_rows",
    "steps",
    "sweep_once",
    "terminal_clients",
    "terminal_ending",
    "timeline",
    "user_input_stamp",
    "window_size",
]
