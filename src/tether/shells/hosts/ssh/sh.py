"""A long-lived POSIX ``sh`` on a remote host: the one channel for small questions about it.

Invariant: every question is a script written to the shell's standard input and answered by
exactly one reply, in the order asked; a reply is the script's standard output up to a line that
starts with ``\\036`` and a marker drawn for that question, followed by its exit status, so no
output can end another question's reply early. Scripts run in a subshell and read nothing (their
standard input is ``/dev/null``, never the channel); their errors are discarded. Output the account's start-up
files print before the shell reads its first script is swallowed by a first, empty question.

The channel starts on first use and again after it ended; a question not answered within its
deadline ends the channel (every question pending on it fails with ``ConnectionLost``). A
question's deadline counts from the deadline of the one before it still unanswered, not from when
it was asked: the shell answers one at a time, so a question queued behind a long one (a sweep
that waits out its grace) is not failed — with the channel and the long one under way on it — for
time it spent waiting its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tether.process.tree import end_child
from tether.shells.hosts.ssh.conn import ConnectionLost

_ASK_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    status: int
    out: str


class RemoteShell:
    """``run(script)`` on the host; ``spawn`` starts the ssh channel (``ssh … 'exec sh'``)."""

    def __init__(
        self,
        *,
        where: str,
        spawn: Callable[[], Awaitable[asyncio.subprocess.Process]],
        ended: Callable[[], None],
    ) -> None:
        self._where = where
        self._spawn = spawn
        self._ended = ended  # called when the channel ends without ``close`` (the host may be gone)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        # Each question still unanswered: its marker, its reply, its deadline (loop time).
        self._pending: deque[tuple[str, asyncio.Future[Reply], float]] = deque()
        self._lock = asyncio.Lock()
        self._closing = False

    async def run(self, script: str, *, timeout: float = _ASK_TIMEOUT_S, isolated: bool = True) -> Reply:
        """``timeout``: from the deadline of the question ahead of it, if one is still unanswered
        (the module docstring); the channel ends at the first deadline a question the shell is
        on passes unanswered. ``isolated=False`` runs the script in the channel's shell itself
        (a fork saved) — only for scripts that never exit, change directory or read their input."""
        proc = await self._ensure()
        fut = self._ask(proc, script, isolated=isolated, timeout=timeout)
        deadline = self._pending[-1][2]  # just asked: the last one
        loop = asyncio.get_running_loop()
        try:
            while not fut.done():
                # The question the shell is on: unanswered past its own deadline, the channel is
                # wedged, whether or not its asker still waits for it (one cancelled by a wait's
                # deadline does not).
                head, limit = (self._pending[0][1], self._pending[0][2]) if self._pending else (fut, deadline)
                if loop.time() >= limit:
                    raise TimeoutError
                await asyncio.wait(
                    {fut, head}, timeout=limit - loop.time(), return_when=asyncio.FIRST_COMPLETED
                )
            return fut.result()
        except TimeoutError:
            # The channel may be wedged (a network that stopped answering): end it; the next
            # question starts a fresh one.
            await self._stop(proc)
            raise ConnectionLost(f"{self._where}: no answer within {timeout:g} s; reconnecting") from None

    async def _ensure(self) -> asyncio.subprocess.Process:
        async with self._lock:
            proc = self._proc
            if proc is not None and proc.returncode is None and self._reader and not self._reader.done():
                return proc
            self._closing = False
            proc = await self._spawn()
            self._proc = proc
            self._reader = asyncio.get_running_loop().create_task(self._read(proc))
            self._ask(proc, ":")  # swallows what the account's start-up files print
            return proc

    def _ask(
        self,
        proc: asyncio.subprocess.Process,
        script: str,
        *,
        isolated: bool = True,
        timeout: float = _ASK_TIMEOUT_S,
    ) -> asyncio.Future[Reply]:
        marker = secrets.token_hex(8)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Reply] = loop.create_future()
        # A question nobody waits for any more (the start-up swallow, one that timed out) fails
        # quietly when the channel ends; whoever still waits gets the error all the same.
        fut.add_done_callback(_retrieve)
        ahead = self._pending[-1][2] if self._pending else 0.0
        self._pending.append((marker, fut, max(loop.time(), ahead) + timeout))
        # A subshell: a script's exit, cd or variables never touch the channel's own shell.
        opening, closing = ("(", ")") if isolated else ("{", "}")
        end = f"printf '\\n\\036%s %s\\n' {marker} \"$?\""
        text = f"{opening} {script}\n{closing} </dev/null 2>/dev/null; {end}\n"
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError, RuntimeError):  # gone: its reader fails the question
            proc.stdin.write(text.encode("utf-8", "surrogateescape"))
        return fut

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            while True:
                raw = await proc.stdout.readline()
                if not raw:
                    break
                line = raw.decode("utf-8", "replace")
                if line.startswith("\x1e") and self._pending:
                    marker, fut, _ = self._pending[0]
                    head, _, status = line[1:].strip().partition(" ")
                    if head == marker:
                        self._pending.popleft()
                        # The script's output, less the line break added before the marker.
                        out = "".join(lines)
                        if out.endswith("\n"):
                            out = out[:-1]
                        if not fut.done():
                            fut.set_result(Reply(status=int(status) if status.isdigit() else 1, out=out))
                        lines = []
                        continue
                lines.append(line)
        finally:
            while self._pending:
                _, fut, _ = self._pending.popleft()
                if not fut.done():
                    fut.set_exception(ConnectionLost(f"connection to {self._where} lost; reconnecting"))
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if not self._closing:
                self._ended()

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        reader = self._reader
        if reader is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await reader

    async def close(self) -> None:
        self._closing = True
        proc, self._proc = self._proc, None
        if proc is None:
            return
        await end_child(proc)
        await self._stop(proc)


def _retrieve(fut: asyncio.Future[Reply]) -> None:
    if not fut.cancelled():
        fut.exception()
