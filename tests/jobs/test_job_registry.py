"""The job table with real processes from the local bash executor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from tether.errors import NotFoundError, RefusedError
from tether.jobs.registry import Job, JobInfo, JobLimitError, JobRegistry
from tether.shell.local import LocalBashExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.types import ShellExecRequest, ShellExpiryPolicy


@pytest.fixture
def executor(tether_home: Path) -> LocalBashExecutor:
    return LocalBashExecutor(
        LocalShellOptions(spill_dir=tether_home / "spill", grace_ms=500, cwd=str(tether_home))
    )


@pytest.fixture
async def jobs() -> AsyncIterator[JobRegistry]:
    table = JobRegistry(max_live=3, max_finished=2)
    yield table
    await table.close()


async def start(jobs: JobRegistry, executor: LocalBashExecutor, command: str, owner: str = "conv-a") -> Job:
    job = jobs.reserve(command=command, description=f"run {command[:20]}", owner=owner)
    spec = executor.resolve(ShellExecRequest(command, on_expiry=ShellExpiryPolicy.NONE))
    job.attach(await executor.execute(spec))
    return job


async def settle(job: Job) -> None:
    assert job.execution is not None
    with anyio.fail_after(HANG_S):
        await job.execution.done


async def test_a_jobs_whole_life(jobs: JobRegistry, executor: LocalBashExecutor, tether_home: Path) -> None:
    gate = tether_home / "gate"
    job = await start(
        jobs, executor, f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done; echo second; exit 3"
    )
    assert [info.status for info in jobs.list()] == ["running"]

    await jobs.wait(job.job_id, 10)
    first = jobs.read(job.job_id)
    assert first.stdout == "first\n" and first.info.status == "running" and not first.lossy

    gate.touch()
    await settle(job)
    second = jobs.read(job.job_id)
    assert second.stdout == "second\n"
    assert (second.info.status, second.info.exit_code, second.info.stopped) == ("completed", 3, None)
    assert jobs.read(job.job_id).stdout == ""  # consumed

    stdout, stderr = jobs.read_from(job.job_id)
    assert stdout.text == "first\nsecond\n" and stdout.closed and stderr.text == ""
    later, _ = jobs.read_from(job.job_id, stdout_offset=len("first\n"))
    assert later.text == "second\n"

    assert jobs.remove(job.job_id).status == "completed"
    with pytest.raises(NotFoundError, match="no job"):
        jobs.get(job.job_id)
    assert jobs.list() == []


async def test_admission_is_bounded_and_kill_is_idempotent(
    jobs: JobRegistry, executor: LocalBashExecutor
) -> None:
    running = [await start(jobs, executor, "sleep 30") for _ in range(3)]
    with pytest.raises(JobLimitError, match=r"3 jobs are running, the limit is 3 \(\[jobs\]\.max_live"):
        jobs.reserve(command="sleep 1", description="one too many", owner="conv-a")
    # A foreground call the bound refused is entered past it (listed, killable), never refused.
    past = jobs.reserve(command="sleep 1", description="foreground", owner="conv-a", bounded=False)
    assert jobs.get(past.job_id).info().status == "starting" and jobs.live_count() == 4
    jobs.release(past)

    assert jobs.kill(running[0].job_id, "user asked") is True
    assert jobs.kill(running[0].job_id, "another reason") is False
    await settle(running[0])
    info = jobs.get(running[0].job_id).info()
    assert (info.status, info.stopped, info.signal) == ("killed", "user asked", "SIGTERM")

    replacement = jobs.reserve(command="true", description="fits now", owner="conv-a")
    jobs.release(replacement)
    assert replacement.job_id not in [i.job_id for i in jobs.list()]

    await jobs.close()
    for job in running:
        await settle(job)
        assert job.info().status == "killed"
    with pytest.raises(RefusedError, match="shutting down"):
        jobs.reserve(command="true", description="too late", owner="conv-a")


async def test_finished_jobs_are_evicted_oldest_first_and_reported(executor: LocalBashExecutor) -> None:
    evicted: list[JobInfo] = []
    jobs = JobRegistry(max_live=4, max_finished=2, on_evict=evicted.append)
    started = []
    for word in ("one", "two", "three"):
        job = await start(jobs, executor, f"echo {word}")
        await settle(job)
        jobs.list()  # the table notices the finish in this order
        started.append(job)
    assert [info.job_id for info in jobs.list()] == [started[1].job_id, started[2].job_id]
    assert [info.job_id for info in evicted] == [started[0].job_id]
    assert jobs.evicted() == [started[0].job_id]
    with pytest.raises(NotFoundError, match=r"was evicted: more than 2 jobs finished after it"):
        jobs.read(started[0].job_id)


async def test_wait_returns_on_new_output_or_exit_or_timeout(
    jobs: JobRegistry, executor: LocalBashExecutor
) -> None:
    job = await start(jobs, executor, "sleep 30")
    await jobs.wait(job.job_id, 0.05)  # nothing arrives: returns after the timeout
    assert jobs.read(job.job_id).stdout == ""
    jobs.kill(job.job_id, "enough")
    await jobs.wait(job.job_id, 10)
    await settle(job)
    assert jobs.read(job.job_id).info.stopped == "enough"
