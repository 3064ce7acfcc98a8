"""What every write to a shell shares: its context (``Write``), the safety path around it, and
the small helpers that type and settle.

Invariant: every write passes ``SessionHooks.before_write`` (locks, guard, macros, vault) before a
byte is typed and ``after_write`` afterwards, on every path (``guarded``); in a confining
deployment, only into a shell that is confined or was granted to run unconfined.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from tether.approvals import PersonChannel
from tether.errors import RefusedError
from tether.shells.domain import Shells
from tether.shells.host import ShellHost
from tether.shells.outcomes import Outcome
from tether.shells.requests import (
    DEFAULT_POLL_MS,
    Output,
    Safety,
    Wait,
)
from tether.shells.safety.hooks import WriteDecision, WriteIntent, WriteKind
from tether.shells.tmux.commands import PaneInfo
from tether.shells.waits import WaitOutcome, WaitSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """One write's context: which shell, who, and the task's blocks."""

    shell_id: str
    actor: str
    wait: Wait | None
    output: Output
    safety: Safety
    person: PersonChannel | None = None  # the person at the caller's client, when one can be asked


def wait_spec(wait: Wait | None, masking: Callable[[], Callable[[str], str]] | None = None) -> WaitSpec:
    if wait is None:
        return WaitSpec(kind="none")
    return WaitSpec(
        masking=masking,
        kind=wait.kind,
        timeout_ms=wait.timeout_ms,
        poll_ms=wait.poll_ms,
        code=wait.code,
        regex=wait.regex,
        path=wait.path,
        proc=wait.proc,
        threshold=wait.threshold,
    )


def unwrappable_reason(command: str) -> str | None:
    """Why a command can never report an exit status of its own (``None`` when it can)."""
    if not command.strip():
        return "the command is empty"
    if command.rstrip().endswith("\\"):
        return "the command ends with a line continuation '\\'"
    return None


@asynccontextmanager
async def guarded(
    shells: Shells, w: Write, kind: WriteKind, text: str, *, submit: bool = True
) -> AsyncIterator[WriteDecision]:
    """``before_write`` … ``after_write`` around one write, with the same intent; the release runs
    whatever happens after a successful ``before_write`` (a refusal, a timeout, a cancellation)."""
    shells.check_writable(w.shell_id)
    intent = WriteIntent(
        shell_id=w.shell_id,
        actor=w.actor,
        kind=kind,
        text=text,
        lock=w.safety.lock,
        bypass_guard=w.safety.bypass_guard,
        reason=w.safety.reason,
        dryrun=w.safety.dryrun,
        force=w.safety.force,
        wait_kind=w.wait.kind if w.wait is not None else None,
        submit=submit,
        person=w.person,
    )
    decision = await shells.hooks.before_write(intent)
    try:
        yield decision
    finally:
        await shells.hooks.after_write(intent)


def refuse_exit_wait(wait: Wait | None, reason: str | None) -> None:
    if wait is not None and wait.kind == "exit" and reason is not None:
        raise RefusedError(f"cannot wait for exit: {reason}; use wait.kind='idle', or wrap it as sh -c '…'")


def with_notes(outcome: Outcome, notes: tuple[str, ...]) -> Outcome:
    return replace(outcome, lines=(*outcome.lines, *notes)) if notes else outcome


async def settle(shells: Shells, host: ShellHost, pane: PaneInfo, w: Write, offset: int) -> WaitOutcome:
    poll = w.wait.poll_ms if w.wait is not None else DEFAULT_POLL_MS
    settle = WaitSpec(kind="settle", poll_ms=poll, timeout_ms=max(3000, 4 * poll))
    return await shells.waits(host).wait(pane, settle, offset)


async def both(typing: Coroutine[Any, Any, None], waiting: asyncio.Future[WaitOutcome]) -> WaitOutcome:
    """The wait's outcome once the keys are typed too. The keys are typed by the calling task, so
    they leave before it first waits; a typing failure ends the wait."""
    try:
        await typing
        return await waiting
    finally:
        if not waiting.done():
            waiting.cancel()


def new_token() -> int:
    return secrets.randbits(40) | 1


def new_buffer() -> str:
    return "tether-" + secrets.token_hex(6)
