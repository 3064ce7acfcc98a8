"""``BlockingTether``: the same calls as ``Tether`` for synchronous code, from any thread.

Invariant: one ``Tether`` runs on an event loop in a daemon thread of its own; a call from any
other thread is handed to that loop and waited for, so this module adds no behaviour of its own.
A call never blocks an event loop: from inside a running loop (or from the tools' own thread) it
is refused with a ``UsageError`` pointing to ``Tether``. A ``KeyboardInterrupt`` (or any exception)
while a call waits cancels that call — a foreground command is killed with its process tree — before
it propagates. Nothing outlives the object: ``close()`` cancels calls still running, kills the
background jobs and ends the thread, and one that was never closed is closed when the interpreter
exits (``atexit``; a ``ResourceWarning`` if it is collected first), so a forgetful program leaves
no job and no thread behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

from tether.errors import TetherError, UsageError
from tether.library.session import Tether
from tether.tools.registry import ToolResult

T = TypeVar("T")

# Every BlockingTether not yet closed, for the ``atexit`` hook (weak: collection warns instead).
_OPEN: weakref.WeakSet[BlockingTether] = weakref.WeakSet()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The thread's body (a function, not a method: the thread must not keep its object alive)."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        # A call another thread started while ``close`` ran: cancelled, so its caller is answered.
        loop.run_until_complete(_cancel_the_rest())
    finally:
        loop.close()


async def _cancel_the_rest() -> None:
    """Cancel every other task of this loop and wait for them, until none is left."""
    while others := [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]:
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


class BlockingTether:
    """tether's tools for synchronous code: ``BlockingTether().call("bash", {...})``.

    Takes the same ``home`` and ``conversation`` as ``Tether``. Use it as ``with BlockingTether()
    as t:``, or call ``t.close()`` when done. Any thread may call it; calls from several threads
    run concurrently on its one loop.
    """

    def __init__(
        self, *, home: str | os.PathLike[str] | None = None, conversation: str | None = None
    ) -> None:
        self._closed = True  # until the thread runs: ``__del__`` of a half-made object says nothing
        self._tether = Tether(home=home, conversation=conversation)  # a bad home or config raises here
        self.home = self._tether.home
        self.conversation = self._tether.conversation
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop,), name="tether-library", daemon=True
        )
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False
        _OPEN.add(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<BlockingTether {state} home={str(self.home)!r} conversation={self.conversation!r}>"

    def tools(self) -> list[str]:
        """The names of the tools this deployment offers (``bash``, ``shell_run``, …)."""
        return self._tether.tools()

    def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """``Tether.call``, waited for: the result, or the ``TetherError`` the call raised."""
        self._check_caller("call")
        return self._wait(self._tether.call(tool, arguments))

    def close(self) -> None:
        """Cancel calls still running, kill the background jobs, end the thread; idempotent. The
        shells opened stay (close them with ``shell_manage``, kind ``close``)."""
        with self._lock:
            if self._closed:
                return
            if threading.current_thread() is self._thread:
                raise UsageError(
                    "close: BlockingTether was closed from its own tools' thread; close it from yours"
                )
            self._closed = True
        _OPEN.discard(self)
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def __enter__(self) -> BlockingTether:
        if self._closed:
            raise UsageError(f"with: {self!r} is closed; create a new BlockingTether")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"{self!r} was never closed: use 'with BlockingTether() as t:' or 't.close()'",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )
            if sys.is_finalizing():
                return  # the tools' thread no longer runs: waiting on it would hang the exit
            # Collected on the tools' own thread, it cannot close: its jobs end with the process.
            with contextlib.suppress(Exception):
                self.close()

    async def _shutdown(self) -> None:
        """On the loop: cancel every other call still running, then close the ``Tether``."""
        await _cancel_the_rest()
        await self._tether.aclose()

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it to end. On an exception here while it runs
        (a ``KeyboardInterrupt``), cancel it — a foreground command is killed with its tree — and
        wait for that too before the exception goes on: nothing of the call is left running."""
        ended = threading.Event()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self._loop.create_task(coro)
            task.add_done_callback(lambda _: ended.set())
            tasks.append(task)

        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop has closed: ``close`` ran in another thread meanwhile
            coro.close()
            raise UsageError(f"call: {self!r} is closed; create a new BlockingTether") from None
        try:
            ended.wait()
        except BaseException:
            # Callbacks run in order: ``start`` has made the task by the time this one runs.
            self._loop.call_soon_threadsafe(lambda: tasks[0].cancel())
            ended.wait()
            raise
        task = tasks[0]
        if task.cancelled():
            raise TetherError(
                "the call was cancelled: its BlockingTether was closed while the call ran",
                code="TOOL_ABORTED",
            )
        return task.result()

    def _check_caller(self, what: str) -> None:
        if self._closed:
            raise UsageError(f"{what}: {self!r} is closed; create a new BlockingTether")
        if threading.current_thread() is self._thread:
            raise UsageError(
                f"{what}: BlockingTether was called from its own tools' thread; nothing there may wait on it"
            )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise UsageError(
            f"{what}: BlockingTether waits, and this thread runs an asyncio event loop that would stop "
            "meanwhile; inside a coroutine use Tether (await tether.call(...)) instead"
        )


@atexit.register
def _close_forgotten() -> None:
    """Close what a program forgot to: its jobs end before the interpreter does."""
    for forgotten in list(_OPEN):
        forgotten.close()
