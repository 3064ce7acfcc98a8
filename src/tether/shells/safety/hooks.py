"""Extension points the safety features (locks, guard, macros, vault, audit; issue 5) plug into.

Invariant: every write a tool makes to a shell (``run``, ``send``, ``steps``, ``retry``) passes
through ``SessionHooks.before_write`` before a byte is typed, with the lock mode the caller asked
for; the hook may refuse (raise ``RefusedError``), rewrite the command (macro or vault expansion,
reported through ``WriteDecision``), or let it through. ``is_locked`` feeds the ``locked`` /
``unlocked`` states of ``shell_state``; ``mask`` hides vault values in screen text before it is
stored or shown. The defaults allow everything, lock nothing and mask nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tether.approvals import PersonChannel
from tether.shells.guard import ShellState

WriteKind = Literal["run", "send", "steps", "retry"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteIntent:
    shell_id: str
    actor: str
    kind: WriteKind
    text: str  # the command (run/retry), the text (send), or the steps' sends joined by newlines
    lock: Literal["require", "ignore"] = "require"
    bypass_guard: bool = False
    reason: str | None = None
    dryrun: bool = False
    force: bool = False  # proceed past references into a locked vault group (they stay unexpanded)
    wait_kind: str | None = None  # the task's wait.kind (a macro with ``exit`` is refused)
    submit: bool = True  # whether the write ends with Enter (send: its keys include Enter)
    person: PersonChannel | None = None  # the person at the caller's client (a guard block is put to them)


@dataclass(frozen=True, slots=True, kw_only=True)
class LineVerdict:
    """The guard's word on a line the shell is about to read: run it (``notes`` to carry), hold it
    (``incomplete`` says what is still open: bash would wait for more), or ask the shell for these
    functions' bodies first (``needs``)."""

    notes: tuple[str, ...] = ()
    incomplete: str | None = None
    needs: tuple[str, ...] = ()


class LineJudge(Protocol):
    """Judges ``line`` with what the shell reported (``state``); raises ``GuardBlockedError``
    (noted for the audit record) when it must not run. ``lenient``: the text goes to a program in
    front, which may leave it for the shell — only what is plainly dangerous counts. ``pending``:
    the shell already holds lines of this command the guard never saw (a PS2 prompt). ``final``: the
    shell was asked already; a function body still missing is a refusal, not a question. It may
    wait for a person (``[guard] ask``), so it is awaited."""

    async def __call__(
        self,
        line: str,
        state: ShellState | None,
        *,
        lenient: bool = False,
        pending: bool = False,
        final: bool = False,
    ) -> LineVerdict: ...


async def _judge_nothing(
    line: str, state: ShellState | None, *, lenient: bool = False, pending: bool = False, final: bool = False
) -> LineVerdict:
    return LineVerdict()


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteDecision:
    """``text`` is what to type; ``expanded`` is True when it is not the caller's text verbatim
    (a macro), which makes it unwrappable: ``wait.kind=exit`` is then refused before sending.

    ``shown`` is what a dry run and a run record show: the text after macro expansion with each
    vault reference as ``[vault:NAME]`` (never a value); ``notes`` are lines the result must carry
    (references ``force`` left unexpanded, a bypassed guard). ``variables`` are the vault values
    the loader sets (unexported) before the line runs, by shell variable name.
    ``typed_secret`` is True when ``text`` holds a value itself (a program's own prompt): it must
    go through the paste buffer and never be shown or stored. ``submit`` is a macro's setting.
    ``judge`` is the guard at accept time (``judged`` the text it reads for a run)."""

    text: str
    expanded: bool = False
    shown: str | None = None
    notes: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)
    typed_secret: bool = False
    submit: bool = True
    # The guard, for the moment the shell reads a line: runs, steps and sends call it right
    # before the key that makes the shell run what it holds (see ``shells.accept``).
    judge: LineJudge = field(default=_judge_nothing)
    judged: str = ""  # the command as the guard reads it (after macros, before vault values)


async def _allow(intent: WriteIntent) -> WriteDecision:
    return WriteDecision(text=intent.text)


async def _release(intent: WriteIntent) -> None:
    return None


def _never_locked(shell_id: str, actor: str) -> bool:
    return False


def _unmasked(text: str) -> str:
    return text


def _no_masking() -> Callable[[str], str]:
    return _unmasked


@dataclass(slots=True, kw_only=True)
class SessionHooks:
    before_write: Callable[[WriteIntent], Awaitable[WriteDecision]] = field(default=_allow)
    after_write: Callable[[WriteIntent], Awaitable[None]] = field(default=_release)
    # (shell_id, actor) -> locked for that actor: a manual lock, or another actor's write right now.
    is_locked: Callable[[str, str], bool] = field(default=_never_locked)
    # Masks vault values in text that is kept (a screen stored for ``diff``) or shown.
    mask: Callable[[str], str] = field(default=_unmasked)
    # The mask as it is now, as a value that can be pickled (a worker process renders with it).
    masking: Callable[[], Callable[[str], str]] = field(default=_no_masking)
