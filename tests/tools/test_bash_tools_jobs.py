"""Jobs through the tools: a job's life, promotion without loss, job_kill of a foreground call,
cancellation → TOOL_ABORTED, and admission failure falling back to the executor's deadline."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from bash_tools_harness import connected, make_setup, text_of
from mcp.client.session import IncomingMessage
from shell_harness import shell_client

from hang import HANG_MS, HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg
from tether.tools.bash import ToolAborted
from tether.tools.registry import CallContext


def run(command: str, **extra: Any) -> dict[str, Any]:
    return {"command": command, "description": "test command", **extra}


async def until(predicate: Any, what: str, seconds: float = 10) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.01)


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is dead for our purpose once its state says so.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True


async def test_a_jobs_whole_life_through_the_tools(tether_home: Path) -> None:
    gate = tether_home / "gate"
    async with connected(make_setup(tether_home)) as client:
        command = f"echo one; while [ ! -e {gate} ]; do sleep 0.01; done; echo two; exit 5"
        started = await client.call_tool("bash", run(command, run_in_background=True))
        assert started.structured_content is not None
        job_id = started.structured_content["jobId"]

        listed = await client.call_tool("job_list", {})
        assert job_id in text_of(listed) and "running" in text_of(listed)
        filtered = await client.call_tool("job_list", {"status": "running"})  # it takes nothing
        assert filtered.is_error and text_of(filtered).endswith(
            "unknown field 'status' (this tool takes an empty object {})"
        ), text_of(filtered)  # it said "(allowed fields: )"

        first = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        assert first.structured_content is not None
        assert (
            first.structured_content["output"] == "one\n" and first.structured_content["status"] == "running"
        )
        assert text_of(first) == f"one\n[job {job_id} still running]"

        gate.touch()
        outputs = ""
        status = "running"
        with anyio.fail_after(HANG_S):
            while status == "running":
                read = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": 5_000})
                assert read.structured_content is not None
                outputs += read.structured_content["output"]
                status = read.structured_content["status"]
        assert outputs == "two\n"
        assert read.structured_content["exitCode"] == 5
        assert text_of(read).endswith(f"[job {job_id} completed; exit code: 5]")
        empty = await client.call_tool("job_output", {"jobId": job_id})
        assert empty.structured_content is not None and empty.structured_content["output"] == ""

        again = await client.call_tool("job_kill", {"jobId": job_id, "reason": "too late"})
        assert again.structured_content is not None and again.structured_content["killed"] is False

        sleeper = await client.call_tool("bash", run("sleep 30", run_in_background=True))
        assert sleeper.structured_content is not None
        sleeper_id = sleeper.structured_content["jobId"]
        killed = await client.call_tool("job_kill", {"jobId": sleeper_id, "reason": "no longer needed"})
        assert killed.structured_content is not None
        assert killed.structured_content["killed"] is True and killed.structured_content["status"] == "killed"
        assert (
            "[job " + sleeper_id + " killed; stopped: no longer needed; killed by signal: SIGTERM]"
            in text_of(killed)
        )

        unknown = await client.call_tool("job_output", {"jobId": "job-zzzzzz"})
        assert unknown.is_error and text_of(unknown).startswith("NOT_FOUND: no job 'job-zzzzzz'")
        missing = await client.call_tool("job_output", {})
        assert missing.is_error and "field 'jobId' is required" in text_of(missing)
        # The job has ended, so even the longest wait returns at once: over the cap is clamped, said.
        wide = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": 600_001.0})
        assert not wide.is_error, text_of(wide)
        assert text_of(wide).startswith("[timeoutMs 600001 clamped to 600000, the longest job_output waits]")
        assert (
            wide.structured_content is not None and wide.structured_content["requestedTimeoutMs"] == 600_001
        )
        for bad, why in (
            (-1, "input should be greater than or equal to 0"),
            (2.5, "must be an integer (a whole number); got 2.5"),
        ):
            refused = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": bad})
            assert refused.is_error and f"field 'timeoutMs': {why}" in text_of(refused), text_of(refused)
        plain = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": 0.0})
        assert not plain.is_error and "requestedTimeoutMs" not in (plain.structured_content or {})


async def test_promotion_loses_nothing(tether_home: Path) -> None:
    lines = 400
    writer = f"for i in $(seq 1 {lines}); do echo $i; sleep 0.002; done"
    async with connected(make_setup(tether_home)) as client:
        promoted = await client.call_tool("bash", run(writer, timeoutMs=200))
        structured = promoted.structured_content
        assert structured is not None and structured["kind"] == "promoted", text_of(promoted)
        seen = structured["output"]
        status = "running"
        with anyio.fail_after(HANG_S):
            while status == "running":
                read = await client.call_tool(
                    "job_output", {"jobId": structured["jobId"], "timeoutMs": 2_000}
                )
                assert read.structured_content is not None and read.structured_content["lossy"] is False
                seen += read.structured_content["output"]
                status = read.structured_content["status"]
        assert seen.splitlines() == [str(i) for i in range(1, lines + 1)]
        assert structured["output"], "the seed must hold the lines written before the promotion"


async def test_job_kill_stops_a_foreground_call(tether_home: Path) -> None:
    async with connected(make_setup(tether_home)) as first:
        result: list[types.CallToolResult] = []

        async def foreground() -> None:
            result.append(await first.call_tool("bash", run("echo working; sleep 30", timeoutMs=60_000)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(foreground)
            job_id = ""
            with anyio.fail_after(HANG_S):
                while not job_id:
                    jobs = (await first.call_tool("job_list", {})).structured_content
                    assert jobs is not None
                    job_id = jobs["jobs"][0]["jobId"] if jobs["jobs"] else ""
            stopped = await first.call_tool("job_kill", {"jobId": job_id, "reason": "user said stop"})
            assert stopped.structured_content is not None and stopped.structured_content["killed"] is True
        structured = result[0].structured_content
        assert structured is not None and structured["kind"] == "foreground"
        assert structured["stopped"] == "user said stop" and structured["signal"] == "SIGTERM"
        assert "[stopped: user said stop]\n[killed by signal: SIGTERM]" in text_of(result[0])
        after = (await first.call_tool("job_list", {})).structured_content
        assert after is not None and after["jobs"] == []  # a settled foreground call leaves no job


async def test_mcp_cancellation_kills_the_process(tether_home: Path) -> None:
    # Commands run in the command container: `$$` there is not a pid of ours; find the process by
    # its unique argument in our /proc instead.
    token = unique_sleep_arg()
    setup = make_setup(tether_home)
    async with connected(setup) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("bash", run(f"sleep {token}", timeoutMs=60_000))

            tg.start_soon(call)
            await until(lambda: alive_with(token), "the command to start")
            [pid] = alive_with(token)
            tg.cancel_scope.cancel()
        await until(lambda: dead(pid), "the cancelled command to die")
        assert setup.jobs is not None
        await until(lambda: setup.jobs is not None and setup.jobs.list() == [], "the job entry to go")
        still = await client.call_tool("bash", run("echo alive"))
        assert text_of(still) == "alive"


async def test_cancellation_is_tool_aborted_not_output(tether_home: Path) -> None:
    setup = make_setup(tether_home)
    token = unique_sleep_arg()
    ctx = CallContext(actor="conv-test")
    task = asyncio.ensure_future(setup.plugin.call(run(f"sleep {token}", timeoutMs=60_000), ctx))
    await until(lambda: alive_with(token), "the command to start")
    [pid] = alive_with(token)
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        await task
    assert "TOOL_ABORTED" in str(caught.value)
    assert dead(pid)
    assert setup.jobs is not None and setup.jobs.list() == []
    assert issubclass(ToolAborted, asyncio.CancelledError) and ToolAborted.code == "TOOL_ABORTED"


async def test_admission_failure_falls_back_to_the_kill_deadline(tether_home: Path) -> None:
    logged: list[object] = []

    def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            logged.append(message.params.data)

    async with connected(make_setup(tether_home, max_live=1), on_message=on_message) as client:
        hog = await client.call_tool("bash", run("sleep 30", run_in_background=True))
        assert hog.structured_content is not None and hog.structured_content["kind"] == "background"
        full = await client.call_tool("bash", run("sleep 1", run_in_background=True))
        assert full.is_error and text_of(full).startswith("JOB_LIMIT: 1 jobs are running, the limit is 1")

        ran = await client.call_tool("bash", run("echo still runs"))
        assert text_of(ran) == "still runs"
        timed = await client.call_tool("bash", run("sleep 30", timeoutMs=200))
        assert timed.structured_content is not None
        assert (
            timed.structured_content["kind"] == "foreground" and timed.structured_content["timedOut"] is True
        )
        await until(lambda: len(logged) >= 2, "the internal/error events")
        assert all(isinstance(item, dict) and item["event"] == "job_admission" for item in logged)


async def test_output_dropped_from_memory_names_the_file_that_holds_all_of_it(tether_home: Path) -> None:
    # 3,000 numbered lines through a 1,000-byte budget: a job read after it ended, and a promoted
    # seed, miss their start in memory; the spill file has every line and the reader is told where.
    whole = "".join(f"{i}\n" for i in range(1, 3001))
    gate = tether_home / "gate"
    setup = make_setup(tether_home, max_output_bytes=1_000)
    async with connected(setup) as client:
        started = await client.call_tool("bash", run("seq 1 3000; seq 1 3000 >&2", run_in_background=True))
        assert started.structured_content is not None
        job_id = started.structured_content["jobId"]
        # Read once, after it ended (job_list does not consume its output): each job_output says
        # which streams lost bytes in what it returns, and a loaded machine's job can be read
        # between its stdout and its stderr.
        with anyio.fail_after(HANG_S):
            while True:
                listed = (await client.call_tool("job_list", {})).structured_content
                assert listed is not None
                if not any(
                    job["jobId"] == job_id and job["status"] in ("starting", "running")
                    for job in listed["jobs"]
                ):
                    break
                await anyio.sleep(0.02)
        read = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        value = read.structured_content
        assert value is not None and value["lossy"] is True, text_of(read)
        paths = value["spillPaths"]
        assert set(paths) == {"stdout", "stderr"}, paths
        assert [await anyio.Path(path).read_text() for path in paths.values()] == [whole, whole]
        first_line = text_of(read).splitlines()[0]
        assert first_line == (
            "[earlier output was dropped: it exceeded the in-memory budget; "
            f"full stdout: {paths['stdout']}; full stderr: {paths['stderr']}]"
        ), first_line

        writer = f"seq 1 3000; while [ ! -e {gate} ]; do sleep 0.01; done"
        promoted = await client.call_tool("bash", run(writer, timeoutMs=3_000))
        gate.touch()
        seed = promoted.structured_content
        assert seed is not None and seed["kind"] == "promoted", text_of(promoted)
        spill = seed["spillPaths"]["stdout"]
        assert await anyio.Path(spill).read_text() == whole
        assert seed["output"].startswith(
            f"[earlier output was dropped: it exceeded the in-memory budget; full stdout: {spill}]\n"
        ), seed["output"][:200]


async def test_a_command_that_stops_itself_is_reported_suspended_not_running(tether_home: Path) -> None:
    # `kill -STOP $$` (or a program that sends itself SIGTSTP): the job never goes on by itself.
    # It was listed and read as "still running", and job_output waited out its whole timeoutMs.
    async with connected(make_setup(tether_home)) as client:
        started = await client.call_tool(
            "bash", run("echo before; kill -STOP $$; echo after", run_in_background=True)
        )
        assert started.structured_content is not None
        job_id = started.structured_content["jobId"]
        read = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        seen = read.structured_content["output"] if read.structured_content else ""
        with anyio.fail_after(HANG_S):
            while read.structured_content is not None and not read.structured_content.get("suspended"):
                read = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": 200})
                seen += read.structured_content["output"] if read.structured_content else ""
        assert seen == "before\n"
        assert read.structured_content is not None and read.structured_content["status"] == "running"
        assert text_of(read).endswith(
            f"[job {job_id} is suspended: stopped by a signal (SIGSTOP, SIGTSTP or SIGTTIN), it will not go "
            "on by itself; end it with job_kill]"
        ), text_of(read)
        # A long wait on it answers at once: nothing can arrive.
        with anyio.fail_after(HANG_S / 2):
            waited = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        assert waited.structured_content is not None and waited.structured_content["suspended"] is True
        listed = await client.call_tool("job_list", {})
        assert f"{job_id}  suspended" in text_of(listed), text_of(listed)
        killed = await client.call_tool("job_kill", {"jobId": job_id})
        assert killed.structured_content is not None and killed.structured_content["status"] == "killed"
        assert "suspended" not in killed.structured_content

        promoted = await client.call_tool("bash", run("kill -STOP $$", timeoutMs=2_000))
        assert promoted.structured_content is not None and promoted.structured_content["kind"] == "promoted"
        promoted_id = promoted.structured_content["jobId"]
        # The deadline may fall before the shell reached its kill: then the job says so later.
        if promoted.structured_content.get("suspended"):
            assert f"[job {promoted_id} is suspended: stopped by a signal" in text_of(promoted)
        with anyio.fail_after(HANG_S):
            while not (await client.call_tool("job_output", {"jobId": promoted_id})).structured_content.get(
                "suspended"
            ):
                await anyio.sleep(0.05)


async def test_a_second_job_kill_during_the_first_ones_grace_waits_and_says_so(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job takes its time to end on SIGTERM (its trap waits for the gate). A second job_kill
    # meanwhile said "had already ended; [job … still running]" at once, of a job still running.
    gate = tether_home / "gate"
    setup = make_setup(tether_home, grace_ms=HANG_S * 1000)
    assert setup.jobs is not None
    table = setup.jobs
    kills: list[str] = []
    kill = table.kill

    def counted(job_id: str, reason: str) -> bool:
        kills.append(reason)
        if len(kills) == 2:
            gate.touch()  # the second call has reached the table: let the job end now
        return kill(job_id, reason)

    monkeypatch.setattr(table, "kill", counted)
    command = f"trap 'while [ ! -e {gate} ]; do sleep 0.01; done; exit 0' TERM; echo ready; sleep 600 & wait"
    async with connected(setup) as client:
        started = await client.call_tool("bash", run(command, run_in_background=True))
        assert started.structured_content is not None
        job_id = started.structured_content["jobId"]
        ready = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        assert ready.structured_content is not None and ready.structured_content["output"] == "ready\n"
        answers: dict[str, types.CallToolResult] = {}

        async def kill_with(reason: str) -> None:
            answers[reason] = await client.call_tool("job_kill", {"jobId": job_id, "reason": reason})

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_with, "first")
            await until(lambda: table.get(job_id).stop_reason is not None, "the first kill", HANG_S)
            tg.start_soon(kill_with, "second")
        first, second = answers["first"], answers["second"]
        assert first.structured_content is not None and first.structured_content["killed"] is True
        assert second.structured_content is not None and second.structured_content["killed"] is False
        assert second.structured_content["status"] != "running", text_of(second)
        assert text_of(second) == (
            f"job {job_id} was already being stopped; [job {job_id} killed; stopped: first; exit code: 0]"
        ), text_of(second)


@pytest.mark.timeout(300)
async def test_foreground_calls_past_the_job_limit_are_listed_and_killable(tether_home: Path) -> None:
    # A burst of foreground calls past [jobs].max_live ran without a job entry: job_list did not
    # show them and job_kill could not stop them (only the deadline or a cancel could), and the
    # one word about it was a log message the agent never sees. Real `tether mcp` over stdio.
    (tether_home / "config.toml").write_text("[jobs]\nmax_live = 2\n")
    tokens = [unique_sleep_arg() for _ in range(4)]
    logged: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    results: dict[str, types.CallToolResult] = {}
    try:
        async with shell_client(tether_home, logging_callback=on_log) as client:

            async def jobs() -> dict[str, str]:
                listed = await client.call_tool("job_list", {})
                assert listed.structured_content is not None
                return {row["command"]: row["jobId"] for row in listed.structured_content["jobs"]}

            with anyio.fail_after(HANG_S):
                async with anyio.create_task_group() as tg:

                    async def one(token: str) -> None:
                        arguments = run(f"sleep {token}", timeoutMs=HANG_MS)
                        results[token] = await client.call_tool("bash", arguments)

                    for token in tokens:
                        tg.start_soon(one, token)
                    await until(lambda: all(alive_with(t) for t in tokens), "every call to run", HANG_S)
                    listed = await jobs()
                    assert sorted(listed) == sorted(f"sleep {t}" for t in tokens), listed
                    # Past the bound too, job_kill stops the call, and its result says so.
                    last = tokens[-1]
                    killed = await client.call_tool("job_kill", {"jobId": listed[f"sleep {last}"]})
                    assert not killed.is_error and killed.structured_content is not None, text_of(killed)
                    assert killed.structured_content["killed"] is True
                    await until(lambda: last in results, "the killed call to answer", HANG_S)
                    stopped = results[last].structured_content
                    assert stopped is not None and stopped["stopped"] == "stopped by job_kill", stopped
                    # The rest are cancelled by the client: each entry leaves with its process tree.
                    tg.cancel_scope.cancel()
                while await jobs():
                    await anyio.sleep(0.01)
            assert [t for t in tokens if alive_with(t)] == []
            assert logged and all(item["event"] == "job_admission" for item in logged), logged
            assert all("runs in the foreground under its deadline" in item["message"] for item in logged)
    finally:
        kill_all([pid for token in tokens for pid in alive_with(token)])
