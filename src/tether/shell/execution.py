"""``ShellExecution`` handles: a live one over a ``ManagedProcess``, and an already-settled one.

Invariant: the first cause that cuts a command short is the one recorded — a deadline sets
``timed_out``, a caller abort sets ``aborted``, an explicit ``kill()`` sets neither (its reason is
kept for ``[stopped: …]``) — and later causes never overwrite it, which is what keeps
``ShellRunResult``'s "timed_out and aborted are exclusive" rule true by construction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.process.capture import CapturedStream, StreamCursor
from tether.process.spawn import ManagedProcess, ProcessState
from tether.shell.types import (
    AbortSignal,
    DoneSignal,
    ShellCollectedOutput,
    ShellException,
    ShellExecSpec,
    ShellExecution,
    ShellExpiryPolicy,
    ShellProcessStatus,
    ShellRunResult,
)

if TYPE_CHECKING:  # built only by an incremental read or a confined command: imported there
    from tether.shell.late_types import ConfinedLaunch, ShellProcessRead, ShellSandboxInfo

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CapturedPair:
    """``observed``: the two captured streams, readable by offset without consuming them."""

    stdout: CapturedStream
    stderr: CapturedStream


def collected(stream: CapturedStream) -> ShellCollectedOutput:
    return ShellCollectedOutput(
        text=stream.tail_text(),
        truncated=stream.truncated,
        spill_path=stream.spill_path,
        spill_refused=stream.spill_refused,
    )


class _Cursors:
    def __init__(self, pair: CapturedPair) -> None:
        self._pair = pair
        self._out = StreamCursor(pair.stdout)
        self._err = StreamCursor(pair.stderr)

    def take(self) -> ShellProcessRead:
        from tether.shell.late_types import DroppedStream, ShellProcessRead

        out, err = self._out.take(), self._err.take()
        # What memory dropped is still whole in the stream's spill file: the reader is told where.
        dropped = tuple(
            DroppedStream(name, stream.spill_path, stream.spill_refused)
            for name, read, stream in (("stdout", out, self._pair.stdout), ("stderr", err, self._pair.stderr))
            if read.lost
        )
        return ShellProcessRead(stdout=out.text, stderr=err.text, lossy=bool(dropped), dropped=dropped)


class SettledShellExecution(ShellExecution):
    """A handle that never had a live process: spawn failed, or the deadline passed before spawn."""

    def __init__(
        self, *, timeout_ms: int, failure: ShellException | None = None, timed_out: bool = False
    ) -> None:
        self._timeout_ms = timeout_ms
        self._failure = failure
        stdout = CapturedStream(max_bytes=4096)
        stderr = CapturedStream(max_bytes=4096)
        if failure is not None:
            stderr.feed(f"spawn failed: {failure.message}\n".encode())
        stdout.close()
        stderr.close()
        self._pair = CapturedPair(stdout, stderr)
        self._cursors = _Cursors(self._pair)
        event = asyncio.Event()
        event.set()
        self._done = DoneSignal(event)
        # Built once: result() is memoized on every handle (the same object each time).
        self._result = ShellRunResult(
            exit_code=None,
            signal=None,
            timed_out=timed_out,
            aborted=False,
            timeout_ms=timeout_ms,
            stdout=ShellCollectedOutput(),
            stderr=ShellCollectedOutput(),
        )

    @property
    def status(self) -> ShellProcessStatus:
        return ShellProcessStatus.KILLED

    @property
    def exit_code(self) -> int | None:
        return None

    @property
    def signal(self) -> str | None:
        return None

    @property
    def sandbox(self) -> ShellSandboxInfo | None:
        return None

    @property
    def pid(self) -> int | None:
        return None

    @property
    def kill_reason(self) -> str | None:
        return None

    @property
    def stopping(self) -> bool:
        return True

    @property
    def done(self) -> DoneSignal:
        return self._done

    @property
    def observed(self) -> CapturedPair:
        return self._pair

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    def read_output(self) -> ShellProcessRead:
        return self._cursors.take()

    def kill(self, reason: str | None = None) -> bool:
        return False

    async def result(self) -> ShellRunResult:
        if self._failure is not None:
            raise self._failure
        return self._result


class LocalShellExecution(ShellExecution):
    """A live command: deadline per ``on_expiry``, caller abort, kill, memoized result."""

    def __init__(
        self,
        process: ManagedProcess,
        spec: ShellExecSpec,
        *,
        abort: AbortSignal | None,
        launch: ConfinedLaunch | None = None,
    ) -> None:
        self._process = process
        self._spec = spec
        self._launch = launch
        self._pair = CapturedPair(process.stdout, process.stderr)
        self._cursors = _Cursors(self._pair)
        self._timed_out = False
        self._aborted = False
        self._expired = False
        self._kill_reason: str | None = None
        self._sandbox: ShellSandboxInfo | None = None
        self._result: ShellRunResult | None = None
        self._finishing: asyncio.Task[None] | None = None
        self._done_event = asyncio.Event()
        self._done = DoneSignal(self._done_event)
        loop = asyncio.get_running_loop()
        delay = max(0.0, spec.resolved_at + spec.timeout_ms / 1000 - time.monotonic())
        self._deadline: asyncio.TimerHandle | None = loop.call_later(delay, self._on_deadline)
        self._remove_abort: Callable[[], None] | None = None
        if abort is not None:
            self._remove_abort = abort.add_listener(self._on_abort)
        process.add_settled_callback(self._on_settled)

    # -- causes --------------------------------------------------------------------------------
    def _on_deadline(self) -> None:
        self._deadline = None
        self._expired = True
        if self._spec.on_expiry is ShellExpiryPolicy.KILL and self._cut("timed_out"):
            self._process.kill(self._spec.grace_ms)

    def _on_abort(self, reason: str) -> None:
        if self._cut("aborted"):
            self._kill_reason = reason
            self._process.kill(self._spec.grace_ms)

    def _cut(self, cause: str) -> bool:
        """Record the first cause that ends the command; False when something already did."""
        if self.stopping:
            return False
        if cause == "timed_out":
            self._timed_out = True
        elif cause == "aborted":
            self._aborted = True
        return True

    def kill(self, reason: str | None = None) -> bool:
        if self._process.settled.is_set():
            return False
        if self._cut("killed"):
            self._kill_reason = reason
        return self._process.kill(self._spec.grace_ms)

    def _on_settled(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._remove_abort is not None:
            self._remove_abort()
            self._remove_abort = None
        if self._launch is None:
            self._done_event.set()
            return
        # The confinement's verdict may take a moment (it can have something to undo on disk):
        # the result waits for it, the event loop does not.
        self._finishing = asyncio.get_running_loop().create_task(self._finish(self._launch))

    async def _finish(self, launch: ConfinedLaunch) -> None:
        from tether.shell.late_types import ShellSandboxDenial

        try:
            if launch.report is not None:
                sandbox = await launch.report(self._process.stderr.tail_text())
                # A bound the command met: the kernel refused its forks, or killed it for memory.
                reached = tuple(
                    ShellSandboxDenial(kind="limit", target=what, detail=sentence)
                    for what, sentence in self._process.bounds_reached
                )
                if reached:
                    sandbox = dataclasses.replace(sandbox, denials=(*sandbox.denials, *reached))
                self._sandbox = sandbox
        except Exception:
            # A report that fails must never leave the result hanging (or become a traceback).
            logger.exception("confinement %r: the sandbox report failed", self._spec.argv[:1])
        finally:
            try:
                if launch.cleanup is not None:
                    launch.cleanup()
            finally:
                self._done_event.set()

    # -- state ---------------------------------------------------------------------------------
    @property
    def status(self) -> ShellProcessStatus:
        if not self._done_event.is_set():
            return ShellProcessStatus.RUNNING
        if self._process.state is ProcessState.KILLED:
            return ShellProcessStatus.KILLED
        return ShellProcessStatus.COMPLETED

    @property
    def exit_code(self) -> int | None:
        return self._process.exit_code if self._done_event.is_set() else None

    @property
    def signal(self) -> str | None:
        return self._process.signal if self._done_event.is_set() else None

    @property
    def done(self) -> DoneSignal:
        return self._done

    @property
    def sandbox(self) -> ShellSandboxInfo | None:
        return self._sandbox

    @property
    def observed(self) -> CapturedPair:
        return self._pair

    @property
    def timeout_ms(self) -> int:
        return self._spec.timeout_ms

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def kill_reason(self) -> str | None:
        return self._kill_reason

    @property
    def stopping(self) -> bool:
        return self._process.settled.is_set() or self._process.kill_requested

    @property
    def expired(self) -> bool:
        """The deadline passed (with ``on_expiry=NONE`` the process may still be running)."""
        return self._expired

    @property
    def suspended(self) -> bool:
        return not self._done_event.is_set() and self._process.suspended

    @property
    def detached(self) -> bool:
        """Background children were left running (``keep_background``)."""
        return self._process.detached

    def read_output(self) -> ShellProcessRead:
        return self._cursors.take()

    async def result(self) -> ShellRunResult:
        if self._result is None:
            await self._done
            if self._result is None:
                self._result = ShellRunResult(
                    exit_code=self._process.exit_code,
                    signal=self._process.signal,
                    timed_out=self._timed_out,
                    aborted=self._aborted,
                    timeout_ms=self._spec.timeout_ms,
                    stdout=collected(self._process.stdout),
                    stderr=collected(self._process.stderr),
                    sandbox=self._sandbox,
                )
        return self._result
