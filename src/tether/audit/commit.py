"""Group commit: audit appends from concurrent callers share one lock hold and one ``fsync``.

Invariant: ``GroupCommit.append`` returns only once its record is durable — exactly the
guarantee of ``AuditLog.append`` (never acknowledged before the ``fsync``). Records queued while a
batch is being synced go into the next batch, in arrival order, under one ``flock`` and one
``fsync``: with N calls finishing at once, the disk flushes once instead of N times.

One daemon thread per process serves every home (requests name their log), started on first use.
A dedicated thread hands a record over in tens of microseconds, where a worker-pool call
(``anyio.to_thread``) costs several times that on a busy machine. The record's fields are checked
and redacted by the caller (``AuditLog.body``), so a bad field fails the caller, not the batch.

A call that ends alone — no other call open in the process (``opened``), nothing queued for the
thread, and the log's lock free — appends on its own thread instead: its record could share the
``fsync`` with nobody, and the hand-over to the thread and back costs more than the append itself
(0.3 of 0.85 ms a record on this project's 2-core VM). The loop then waits through that one
``fsync`` (a few tenths of a millisecond; tens when it meets the kernel's writeback), during which
it serves nothing else — the price of the shortcut, paid only while no other call is in progress.
With another call open, or the lock held by another appender, the record goes to the thread and
the loop keeps serving. When the thread cannot be started (no process or thread left to the user
or the cgroup), every record is appended on the caller's thread, as a lone call's is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from tether.audit.log import AuditAppendError, AuditLog
from tether.audit.record import AuditRecord, Outcome, Source

logger = logging.getLogger(__name__)

MAX_BATCH: Final = 256


@dataclass(slots=True, kw_only=True)
class _Request:
    log: AuditLog
    body: dict[str, Any]
    done: concurrent.futures.Future[AuditRecord] = field(default_factory=concurrent.futures.Future)


class GroupCommit:
    """The process's audit writer thread (see the module docstring)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._count = threading.Lock()  # the two counts below: loops of any thread, and ours
        self._open = 0  # calls in progress (``opened``)
        self._queued = 0  # requests handed to the thread and not answered yet

    @contextmanager
    def opened(self) -> Iterator[None]:
        """One call in progress: while it is open, every other call's record goes to the thread
        (see the module docstring). The tools' middleware holds it around each call."""
        with self._count:
            self._open += 1
        try:
            yield
        finally:
            with self._count:
                self._open -= 1

    def submit(self, log: AuditLog, body: dict[str, Any]) -> concurrent.futures.Future[AuditRecord]:
        """Queue one checked body (``AuditLog.body``); the future resolves once it is durable."""
        request = _Request(log=log, body=body)
        self._ensure_thread()
        with self._count:
            self._queued += 1
        request.done.add_done_callback(self._answered)
        self._queue.put(request)
        return request.done

    def _answered(self, _done: concurrent.futures.Future[AuditRecord]) -> None:
        with self._count:
            self._queued -= 1

    def _alone(self) -> bool:
        """No other call open (the caller's own may be), nothing queued for the thread."""
        with self._count:
            return self._open <= 1 and self._queued == 0

    async def append(
        self,
        log: AuditLog,
        *,
        actor: str,
        source: Source,
        tool: str,
        action: str,
        targets: Sequence[str] = (),
        command: str | None = None,
        outcome: Outcome = "ok",
        detail: str = "",
        reason: str | None = None,
        flags: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> AuditRecord:
        """``AuditLog.append`` for the event loop: awaits durability without blocking the loop,
        except for a call that ends alone (see the module docstring)."""
        body = log.body(
            actor=actor,
            source=source,
            tool=tool,
            action=action,
            targets=targets,
            command=command,
            outcome=outcome,
            detail=detail,
            reason=reason,
            flags=flags,
            extra=extra,
        )
        if self._alone():
            written = log.append_unless_locked([body])
            if written is not None:
                return written[0]
        try:
            future = self.submit(log, body)
        except RuntimeError:
            # No thread can start (the user's or the cgroup's process limit is reached): the record
            # is appended here, the loop waiting through its ``fsync``, rather than lost.
            return log.append_bodies([body])[0]
        return await asyncio.wrap_future(future)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start:
            if self._thread is None:
                thread = threading.Thread(target=self._serve, name="tether-audit-commit", daemon=True)
                thread.start()
                self._thread = thread

    def _serve(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for requests in _by_directory(batch):
                _commit(requests)


def _by_directory(batch: list[_Request]) -> list[list[_Request]]:
    groups: dict[str, list[_Request]] = {}
    for request in batch:
        groups.setdefault(str(request.log.dir), []).append(request)
    return list(groups.values())


def _commit(requests: list[_Request]) -> None:
    live = [r for r in requests if r.done.set_running_or_notify_cancel()]
    if not live:
        return
    try:
        records = live[0].log.append_bodies([r.body for r in live])
    except AuditAppendError as exc:
        # Records made durable before the failure (a seal inside the batch syncs early) are acknowledged.
        for request, record in zip(live, exc.durable, strict=False):
            request.done.set_result(record)
        for request in live[len(exc.durable) :]:
            request.done.set_exception(exc)
        return
    except BaseException as exc:  # every waiter must hear, whatever went wrong
        for request in live:
            request.done.set_exception(exc)
        if not isinstance(exc, Exception):
            raise
        return
    for request, record in zip(live, records, strict=True):
        request.done.set_result(record)


COMMITTER: Final = GroupCommit()
