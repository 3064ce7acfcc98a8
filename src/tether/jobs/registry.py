"""The background job table: one-shot executions that outlive (or may outlive) the call that started them.

Invariants this module owns:

- Admission is bounded: at most ``max_live`` running jobs (reservations included); one more is a
  ``JobLimitError``, decided synchronously so two concurrent starts cannot both squeeze in. The one
  exception is ``reserve(bounded=False)``: a foreground call the bound refused is still entered
  (listed, killable), because nothing may run that ``job_list`` cannot show and ``job_kill`` cannot
  stop; such a call never becomes a background job, and ends with its call.
- A job's output is read two ways over the *same* capture: ``read()`` consumes (what arrived since
  the previous consuming read, ``lossy`` when memory dropped some first) and ``read_from(offsets)``
  does not. A foreground call promoted to a job seeds its answer with one consuming read, so the
  job's next ``read()`` starts exactly where that seed ended: no gap, no duplicate.
- ``kill(reason)`` is idempotent; the first reason is the one a result reports as ``stopped``.
- Finished jobs stay readable until removed, or until more than ``max_finished`` have finished:
  then the oldest finished are evicted, each eviction logged and remembered, so a later lookup
  says "evicted" instead of "unknown".
- ``close()`` kills every running job: no job outlives the process that owns the table.

Jobs are per process (``tether mcp`` or ``tether serve``); they are not persisted.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import anyio

from tether.errors import NotFoundError, RefusedError
from tether.process.reads import StreamRead
from tether.shell.types import DroppedStream, ShellExecution, ShellProcessStatus, join_streams

logger = logging.getLogger(__name__)

JobStatus = Literal["starting", "running", "completed", "killed"]
_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_EVICTED_MEMORY = 1024  # how many evicted ids are remembered for a clear "evicted" answer


_Ids = list[str]  # (``JobRegistry.list`` shadows the builtin inside the class body)


class JobLimitError(RefusedError):
    code = "JOB_LIMIT"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    job_id: str
    command: str
    description: str
    owner: str
    status: JobStatus
    exit_code: int | None
    signal: str | None
    stopped: str | None  # the kill reason, when something killed it
    started_at: float  # wall clock (time.time())
    background: bool  # False while a foreground call still waits on it
    suspended: bool = False  # running, but stopped by a signal: it will not go on by itself


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRead:
    """A consuming read: output since the previous ``read()`` plus the job's state after it."""

    info: JobInfo
    stdout: str
    stderr: str
    lossy: bool
    dropped: tuple[DroppedStream, ...] = ()  # streams that lost bytes, with their spill file

    @property
    def text(self) -> str:
        return join_streams(self.stdout, self.stderr)


async def _settled(execution: ShellExecution) -> None:
    await execution.done


def new_job_id() -> str:
    return "job-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(6))


class Job:
    """One entry of the table. ``execution`` is None between ``reserve`` and ``attach``."""

    def __init__(self, *, job_id: str, command: str, description: str, owner: str) -> None:
        self.job_id = job_id
        self.command = command
        self.description = description
        self.owner = owner
        self.started_at = time.time()
        self.execution: ShellExecution | None = None
        self.background = False
        self.finished_seen = False
        self._kill_reason: str | None = None

    @property
    def running(self) -> bool:
        return self.execution is None or not self.execution.done.is_set()

    def info(self) -> JobInfo:
        execution = self.execution
        if execution is None:
            status: JobStatus = "starting"
        elif execution.status is ShellProcessStatus.RUNNING:
            status = "running"
        else:
            status = "completed" if execution.status is ShellProcessStatus.COMPLETED else "killed"
        return JobInfo(
            job_id=self.job_id,
            command=self.command,
            description=self.description,
            owner=self.owner,
            status=status,
            exit_code=execution.exit_code if execution else None,
            signal=execution.signal if execution else None,
            stopped=self.kill_reason,
            started_at=self.started_at,
            background=self.background,
            suspended=status == "running" and execution is not None and execution.suspended,
        )

    @property
    def kill_reason(self) -> str | None:
        """Why it was killed: the job table's reason, else the execution's own (e.g. a deadline)."""
        if self._kill_reason is not None:
            return self._kill_reason
        return self.execution.kill_reason if self.execution is not None else None

    @property
    def stop_reason(self) -> str | None:
        """The reason given to ``kill`` through the job table (``job_kill``), if any."""
        return self._kill_reason

    def attach(self, execution: ShellExecution) -> None:
        self.execution = execution
        if self._kill_reason is not None:
            # job_kill arrived while the process was still being spawned.
            execution.kill(self._kill_reason)

    def kill(self, reason: str) -> bool:
        """True only for the call that stopped it; later calls (or after it ended) are no-ops."""
        if self._kill_reason is not None or not self.running:
            return False
        if self.execution is not None and self.execution.stopping:
            # Its deadline (or the caller's abort) is already ending it: that cause is the one its
            # result reports, not a "stopped" this call did not do.
            return False
        self._kill_reason = reason
        if self.execution is None:
            return True  # attach() delivers the kill once the process exists
        return self.execution.kill(reason)


class JobRegistry:
    """The process-wide job table (see the module docstring for its invariants)."""

    def __init__(
        self,
        *,
        max_live: int = 16,
        max_finished: int = 64,
        on_evict: Callable[[JobInfo], None] | None = None,
    ) -> None:
        if max_live < 1:
            raise ValueError("max_live must be at least 1")
        self.max_live = max_live
        self.max_finished = max_finished
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._finished: OrderedDict[str, None] = OrderedDict()  # finish order, oldest first
        self._evicted: OrderedDict[str, str] = OrderedDict()  # job id -> command, for clear answers
        self._on_evict = on_evict
        self._closed = False

    # -- admission ------------------------------------------------------------------------------

    def live_count(self) -> int:
        self._sweep()
        return sum(1 for job in self._jobs.values() if job.running)

    def reserve(self, *, command: str, description: str, owner: str, bounded: bool = True) -> Job:
        """Admit a job before its process exists (raises ``JobLimitError`` at the bound).

        ``bounded=False`` enters it past the bound: only for a foreground call, which the caller
        keeps to its own deadline and removes when the call ends (it is never promoted)."""
        if self._closed:
            raise RefusedError("the job table is closed: this tether process is shutting down")
        live = self.live_count()
        if bounded and live >= self.max_live:
            raise JobLimitError(
                f"{live} jobs are running, the limit is {self.max_live} ([jobs].max_live in config.toml); "
                "wait for one with job_output or stop one with job_kill"
            )
        job_id = new_job_id()
        while job_id in self._jobs or job_id in self._evicted:
            job_id = new_job_id()
        job = Job(job_id=job_id, command=command, description=description, owner=owner)
        self._jobs[job_id] = job
        return job

    def start(self, execution: ShellExecution, *, command: str, description: str, owner: str) -> Job:
        job = self.reserve(command=command, description=description, owner=owner)
        job.attach(execution)
        return job

    # -- lookup ---------------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        self._sweep()
        job = self._jobs.get(job_id)
        if job is not None:
            return job
        if job_id in self._evicted:
            raise NotFoundError(
                f"job {job_id} was evicted: more than {self.max_finished} jobs finished after it "
                "([jobs].max_finished); read finished jobs sooner or raise the bound"
            )
        raise NotFoundError(f"no job {job_id!r}; job_list shows the jobs of this conversation")

    def list(self, owner: str | None = None) -> list[JobInfo]:
        self._sweep()
        return [job.info() for job in self._jobs.values() if owner is None or job.owner == owner]

    # -- output ---------------------------------------------------------------------------------

    def read(self, job_id: str) -> JobRead:
        job = self.get(job_id)
        if job.execution is None:
            return JobRead(info=job.info(), stdout="", stderr="", lossy=False)
        chunk = job.execution.read_output()
        return JobRead(
            info=job.info(),
            stdout=chunk.stdout,
            stderr=chunk.stderr,
            lossy=chunk.lossy,
            dropped=chunk.dropped,
        )

    def read_from(
        self, job_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0
    ) -> tuple[StreamRead, StreamRead]:
        """Non-consuming reads of both streams from byte offsets."""
        job = self.get(job_id)
        if job.execution is None:
            empty = StreamRead(text="", start=0, next_offset=0, lost=False, closed=False)
            return empty, empty
        observed = job.execution.observed
        return observed.stdout.read_from(stdout_offset), observed.stderr.read_from(stderr_offset)

    async def read_waiting(self, job_id: str, timeout_s: float) -> JobRead:
        """A consuming read; when nothing is pending yet, waits up to ``timeout_s`` for output or exit."""
        first = self.read(job_id)
        if first.stdout or first.stderr or first.info.status not in ("running", "starting") or timeout_s <= 0:
            return first
        if first.info.suspended:
            return first  # stopped by a signal: nothing will arrive, however long one waits
        await self.wait(job_id, timeout_s)
        second = self.read(job_id)
        dropped = tuple({stream.name: stream for stream in (*first.dropped, *second.dropped)}.values())
        return JobRead(
            info=second.info,
            stdout=second.stdout,
            stderr=second.stderr,
            lossy=first.lossy or second.lossy,
            dropped=dropped,
        )

    async def wait(self, job_id: str, timeout_s: float) -> None:
        """Return when the job has output not yet consumed, has ended, or ``timeout_s`` passed."""
        job = self.get(job_id)
        execution = job.execution
        if execution is None or timeout_s <= 0 or execution.done.is_set():
            return
        observed = execution.observed
        waits = (
            observed.stdout.wait_beyond(observed.stdout.total_bytes),
            observed.stderr.wait_beyond(observed.stderr.total_bytes),
            _settled(execution),
        )
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as tg:

                async def first(waiter: Awaitable[None]) -> None:
                    await waiter
                    tg.cancel_scope.cancel()

                for waiter in waits:
                    tg.start_soon(first, waiter)

    # -- control --------------------------------------------------------------------------------

    def kill(self, job_id: str, reason: str) -> bool:
        """Stop a job with ``reason``; True if this call stopped it, False if it had already ended."""
        return self.get(job_id).kill(reason or "stopped")

    def remove(self, job_id: str) -> JobInfo:
        """Forget a job (a running one is killed first, reason "removed")."""
        job = self.get(job_id)
        if job.running:
            job.kill("removed")
        self._jobs.pop(job_id, None)
        self._finished.pop(job_id, None)
        return job.info()

    def release(self, job: Job) -> None:
        """Drop a reservation whose process never started (spawn refused)."""
        if job.execution is None:
            self._jobs.pop(job.job_id, None)

    async def kill_owned_by(self, owner: str, reason: str) -> None:
        """Kill every running job of ``owner`` and wait for each to settle."""
        running = [job for job in self._jobs.values() if job.owner == owner and job.running]
        for job in running:
            job.kill(reason)
        for job in running:
            if job.execution is not None:
                await job.execution.done

    async def close(self) -> None:
        """Kill every running job and wait for each to settle."""
        self._closed = True
        running = [job for job in self._jobs.values() if job.running]
        for job in running:
            job.kill("tether is shutting down")
        for job in running:
            if job.execution is not None:
                await job.execution.done

    # -- bookkeeping ----------------------------------------------------------------------------

    def _sweep(self) -> None:
        for job in self._jobs.values():
            if not job.finished_seen and not job.running:
                job.finished_seen = True
                self._finished[job.job_id] = None
        while len(self._finished) > self.max_finished:
            job_id, _ = self._finished.popitem(last=False)
            if job_id not in self._jobs:
                continue
            job = self._jobs.pop(job_id)
            info = job.info()
            self._evicted[job_id] = job.command
            while len(self._evicted) > _EVICTED_MEMORY:
                self._evicted.popitem(last=False)
            logger.warning(
                "evicted finished job %s (%s): more than %d finished jobs are kept",
                job_id,
                job.command[:80],
                self.max_finished,
            )
            if self._on_evict is not None:
                self._on_evict(info)

    def evicted(self) -> _Ids:
        """Ids evicted so far (most recent last; bounded memory)."""
        return list(self._evicted)
