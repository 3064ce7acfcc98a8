"""The public vocabulary of the one-shot executor seam (spec 000, "resolve 与 execute 两段式").

Invariant: a command that runs and fails, times out or is killed is a ``ShellRunResult``; only
infrastructure failures are ``ShellException`` (stable ``code``). ``timed_out`` and ``aborted``
say which cause cut the command short first, so both true is refused at construction.

Flow::

    request ──resolve()──▶ ShellExecSpec ──await execute(spec, abort=…)──▶ ShellExecution
                                                                          │  status / done / kill()
                                                                          │  observed / read_output()
                                                                          └─ await result() ─▶ ShellRunResult

Error tree (all ``TetherError``)::

    ShellException   code SHELL_MISSING  the configured shell executable cannot be found (execute raises)
                     code SHELL_BAD_CWD  the resolved working directory does not exist (execute raises)
                     code SHELL_SPAWN    the process could not start: execute settles a KILLED handle,
                                         result() raises

Cancellation: ``AbortSignal`` is the caller's abort. Fired before ``execute`` → ``execute`` raises
``ShellAborted`` (an ``asyncio.CancelledError``) and spawns nothing. Fired while running → the tree
is killed and the result has ``aborted=True``.
"""

from __future__ import annotations

import asyncio
import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tether.errors import TetherError
from tether.process.reads import ObservedStreams
from tether.shell.firstuse import first_use

# Defined in ``tether.shell.late_types`` (a plain run of an unconfined command builds none of them)
# and named here too, loaded on first use.
_LATE = frozenset(
    {"ConfinedLaunch", "DroppedStream", "ShellProcessRead", "ShellSandboxDenial", "ShellSandboxInfo"}
)

if TYPE_CHECKING:
    from tether.shell.late_types import ConfinedLaunch as ConfinedLaunch
    from tether.shell.late_types import DroppedStream as DroppedStream
    from tether.shell.late_types import ShellProcessRead as ShellProcessRead
    from tether.shell.late_types import ShellSandboxDenial as ShellSandboxDenial
    from tether.shell.late_types import ShellSandboxInfo as ShellSandboxInfo
else:  # outside the type checker's view, so that it still refuses a name this module does not have
    __getattr__ = first_use(__name__, {"tether.shell.late_types": _LATE})


ShellErrorCode = Literal["SHELL_MISSING", "SHELL_BAD_CWD", "SHELL_SPAWN"]


class ShellException(TetherError):
    """An infrastructure failure of the executor (never a command's own failure)."""

    code: str = "SHELL_SPAWN"

    def __init__(self, message: str, *, code: ShellErrorCode) -> None:
        super().__init__(message, code=code)


class ShellAborted(asyncio.CancelledError):
    """``execute`` saw an abort signal that had already fired: nothing was spawned."""


class ShellExpiryPolicy(enum.Enum):
    """What the deadline does: ``KILL`` acts as an abort (default); ``NONE`` only marks it."""

    KILL = "kill"
    NONE = "none"


class ShellProcessStatus(enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"  # exited on its own (any exit code)
    KILLED = "killed"  # ended by kill(), the deadline, an abort, or never started


class AbortSignal:
    """A caller's one-way "stop" switch, fired at most once, observed by any number of executions.

    Fire it from the event loop thread (``fire`` runs the listeners synchronously there). Listeners
    added after it fired run at once. ``wait()`` returns when it fires.
    """

    __slots__ = ("_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._listeners: list[Callable[[str], None]] = []
        self._event: asyncio.Event | None = None

    @property
    def fired(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    def fire(self, reason: str = "aborted") -> None:
        if self._reason is not None:
            return
        self._reason = reason or "aborted"
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(self._reason)
        if self._event is not None:
            self._event.set()

    def add_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(reason)`` when fired; returns a function that removes it."""
        if self._reason is not None:
            listener(self._reason)
            return lambda: None
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def wait(self) -> None:
        if self._reason is not None:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellExecRequest:
    """What a caller asks for; unset fields are filled by ``ShellExecutor.resolve``.

    The command is the one positional argument (``ShellExecRequest("rg --files | head -20")``, as
    the spec writes it); every other field is keyword-only.
    ``stdout_max_bytes`` is a trusted-caller knob (plugin code, the CLI): it must never appear in a
    model-visible schema, or a model could raise its own output budget past the deployment's.
    ``session_id`` is the agent session for the ``TETHER_SESSION_ID`` built-in (None = headless).
    """

    command: str = field(kw_only=False)
    workdir: str | None = None
    timeout_ms: int | None = None
    on_expiry: ShellExpiryPolicy = ShellExpiryPolicy.KILL
    stdin: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    stdout_max_bytes: int | None = None
    session_id: str | None = None
    # A confining executor's permission request (spec: sandbox_permissions + justification);
    # unconfined providers ignore both. ``granted_by``: the mode was already granted (and audited)
    # by ``authorize`` — by configuration or by the person named.
    sandbox_permissions: str | None = None
    justification: str | None = None
    granted_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellExecSpec:
    """A fully resolved request: ``execute`` applies no default on top of it.

    ``env`` is what is merged into the scrubbed inherited environment (shell-env registry output,
    then the request's explicit entries). ``resolved_at`` (``time.monotonic()``) anchors the
    deadline, so time spent between resolve and spawn counts against ``timeout_ms``.
    """

    command: str
    argv: tuple[str, ...]  # the provider's launch argv, command text as one element
    cwd: str
    timeout_ms: int
    on_expiry: ShellExpiryPolicy
    stdin: str | None
    env: Mapping[str, str]
    stdout_max_bytes: int
    stderr_max_bytes: int
    max_spill_bytes: int
    grace_ms: int
    resolved_at: float
    sandbox_permissions: str | None = None  # the mode a confining executor granted (None = default)
    justification: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCollectedOutput:
    """One captured stream: ``text`` is the tail when ``truncated``; ``spill_path`` holds the whole
    stream, or is None (no spill kept, or the stream outgrew ``max_spill_bytes``); ``spill_refused``
    says why when the file system refused the spill file (a full disk)."""

    text: str = ""
    truncated: bool = False
    spill_path: str | None = None
    spill_refused: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellRunResult:
    """The foreground projection of a settled execution."""

    exit_code: int | None
    signal: str | None
    timed_out: bool
    aborted: bool
    timeout_ms: int
    stdout: ShellCollectedOutput
    stderr: ShellCollectedOutput
    sandbox: ShellSandboxInfo | None = None

    def __post_init__(self) -> None:
        if self.timed_out and self.aborted:
            raise ValueError("ShellRunResult: timed_out and aborted are exclusive (which cause came first?)")


def join_streams(stdout: str, stderr: str) -> str:
    """stdout then stderr as one text, never gluing stderr onto an unfinished stdout line."""
    if stdout and stderr and not stdout.endswith("\n"):
        return f"{stdout}\n{stderr}"
    return stdout + stderr


class DoneSignal:
    """``await execution.done`` — completes when the process settled; never raises; re-awaitable."""

    __slots__ = ("_event",)

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    def is_set(self) -> bool:
        return self._event.is_set()

    def __await__(self) -> Generator[Any, None, None]:
        yield from self._event.wait().__await__()


class ShellExecution(ABC):
    """A live process handle plus its memoized foreground result (spec ``IShellExecution``)."""

    @property
    @abstractmethod
    def status(self) -> ShellProcessStatus: ...

    @property
    @abstractmethod
    def exit_code(self) -> int | None: ...

    @property
    @abstractmethod
    def signal(self) -> str | None:
        """Signal name (e.g. "SIGTERM") when a signal ended the process, else None."""

    @property
    @abstractmethod
    def done(self) -> DoneSignal: ...

    @property
    @abstractmethod
    def sandbox(self) -> ShellSandboxInfo | None: ...

    @property
    @abstractmethod
    def observed(self) -> ObservedStreams: ...

    @property
    @abstractmethod
    def timeout_ms(self) -> int: ...

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The shell's pid (None when spawn failed or never happened)."""

    @property
    def suspended(self) -> bool:
        """Still running, but stopped by a signal and never going on by itself (no process is stopped
        in a handle without one)."""
        return False

    @property
    @abstractmethod
    def stopping(self) -> bool:
        """Settled, or something already ends it: its deadline (``on_expiry=KILL``), an abort or
        ``kill()``. A later kill changes nothing, so it must not claim to have stopped it."""

    @abstractmethod
    def read_output(self) -> ShellProcessRead: ...

    @abstractmethod
    def kill(self, reason: str | None = None) -> bool:
        """End the whole process tree; idempotent, False once settled. ``reason`` is kept for
        the job layer's ``[stopped: reason]``."""

    @property
    @abstractmethod
    def kill_reason(self) -> str | None: ...

    @abstractmethod
    async def result(self) -> ShellRunResult:
        """Await the foreground result (memoized); raises only ``ShellException`` (SHELL_SPAWN)."""


class ShellExecutor(ABC):
    """resolve → execute. ``confining`` executors add sandbox permissions to the model schema."""

    name: str = "shell"
    confining: bool = False

    @abstractmethod
    def resolve(self, request: ShellExecRequest) -> ShellExecSpec: ...

    @abstractmethod
    async def execute(self, spec: ShellExecSpec, *, abort: AbortSignal | None = None) -> ShellExecution: ...


class ShellConfinement(ABC):
    """The seam a confining provider plugs into a local executor: wrap argv, report denials."""

    name: str = "sandbox"

    @abstractmethod
    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch: ...
