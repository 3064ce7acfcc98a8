"""The executor seam on real processes: resolve, execute, expiry, abort, kill, errors, reads."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from proc_probe import alive_with, unique_sleep_arg, wait_until
from tether.errors import UsageError
from tether.shell import (
    AbortSignal,
    LocalBashExecutor,
    LocalShellOptions,
    ShellAborted,
    ShellCollectedOutput,
    ShellException,
    ShellExecRequest,
    ShellExpiryPolicy,
    ShellProcessStatus,
    ShellRunResult,
)
from tether.shell.local import on_path


@pytest.fixture
def executor(tether_home: Path) -> LocalBashExecutor:
    return LocalBashExecutor(LocalShellOptions(cwd=str(tether_home), spill_dir=tether_home / "spill"))


async def _run(executor: LocalBashExecutor, command: str, **kw: object) -> ShellRunResult:
    execution = await executor.execute(executor.resolve(ShellExecRequest(command, **kw)))  # type: ignore[arg-type]
    return await asyncio.wait_for(execution.result(), HANG_S)


def test_resolve_fills_defaults_and_caps_the_timeout(tether_home: Path) -> None:
    executor = LocalBashExecutor(LocalShellOptions(cwd="/tmp", timeout_ms=5000, max_timeout_ms=9000))
    spec = executor.resolve(ShellExecRequest("echo 'a b'"))
    assert spec.argv == ("bash", "-c", "echo 'a b'")
    assert (spec.cwd, spec.timeout_ms, spec.stdout_max_bytes, spec.grace_ms) == ("/tmp", 5000, 64_000, 3000)
    assert spec.max_spill_bytes == 64 * 1024 * 1024
    assert executor.resolve(ShellExecRequest("x", timeout_ms=60_000)).timeout_ms == 9000
    assert executor.resolve(ShellExecRequest("x", workdir="sub")).cwd == "/tmp/sub"
    assert executor.resolve(ShellExecRequest("x", workdir="/etc")).cwd == "/etc"
    assert executor.resolve(ShellExecRequest("x", stdout_max_bytes=10)).stdout_max_bytes == 10
    with pytest.raises(UsageError, match="timeout_ms must be a positive"):
        executor.resolve(ShellExecRequest("x", timeout_ms=0))


def test_request_takes_the_command_positionally_and_the_rest_by_keyword() -> None:
    # The spec's form: new ShellExecRequest("rg --files | head -20") { Workdir = … }.
    request = ShellExecRequest("rg --files | head -20", workdir="/repo", timeout_ms=30_000)
    assert (request.command, request.workdir, request.timeout_ms) == (
        "rg --files | head -20",
        "/repo",
        30_000,
    )
    assert ShellExecRequest(command="echo hi") == ShellExecRequest("echo hi")
    with pytest.raises(TypeError):
        ShellExecRequest("echo hi", "/repo")  # type: ignore[call-arg]


def test_default_cwd_is_the_process_cwd(tether_home: Path) -> None:
    assert LocalBashExecutor().resolve(ShellExecRequest("x")).cwd == os.getcwd()


async def test_nonzero_exit_is_a_result_not_an_error(executor: LocalBashExecutor) -> None:
    result = await _run(executor, "ls /nonexistent")
    assert result.exit_code == 2 and result.signal is None
    assert not result.timed_out and not result.aborted
    assert "nonexistent" in result.stderr.text


async def test_missing_shell_and_bad_cwd_raise_from_execute(tether_home: Path) -> None:
    missing = LocalBashExecutor(LocalShellOptions(executable="/nonexistent/bash"))
    with pytest.raises(ShellException) as info:
        await missing.execute(missing.resolve(ShellExecRequest("true")))
    assert info.value.code == "SHELL_MISSING"
    unnamed = LocalBashExecutor(LocalShellOptions(executable="no-such-shell-xyz"))
    with pytest.raises(ShellException, match="not on PATH"):
        await unnamed.execute(unnamed.resolve(ShellExecRequest("true")))
    executor = LocalBashExecutor()
    with pytest.raises(ShellException) as info:
        await executor.execute(executor.resolve(ShellExecRequest("true", workdir="/nonexistent/dir")))
    assert info.value.code == "SHELL_BAD_CWD"


def _shell_path(tmp_path: Path) -> list[Path]:
    """Four PATH entries holding a `myshell` that is a directory, a file without the execute bit,
    a dangling link, and bash (through a link)."""
    dirs = [tmp_path / name for name in ("dir", "plain", "dangling", "real")]
    for directory in dirs:
        directory.mkdir()
    (dirs[0] / "myshell").mkdir()
    (dirs[1] / "myshell").write_text("#!/bin/sh\n")
    (dirs[2] / "myshell").symlink_to(tmp_path / "nowhere")
    (dirs[3] / "myshell").symlink_to(shutil.which("bash") or "/bin/bash")
    return dirs


def test_the_shell_is_found_on_path_where_shutil_which_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = _shell_path(tmp_path)
    monkeypatch.chdir(dirs[3])  # an empty PATH entry is the working directory
    every = os.pathsep.join(map(str, dirs))
    paths = [
        every,
        "",
        str(dirs[1]),
        f"{dirs[3]}{os.pathsep}{dirs[3]}",
        f"{tmp_path / 'none'}{os.pathsep}{every}",
    ]
    paths += [f"{os.pathsep}{dirs[0]}", f"{dirs[0]}{os.pathsep}", str(dirs[0]), os.pathsep]
    for path in paths:
        for name in ("myshell", "nonesuch"):
            assert on_path(name, path) == shutil.which(name, path=path), (name, path)
    assert on_path("myshell", every) == str(dirs[3] / "myshell")


async def test_a_shell_named_without_a_directory_runs_from_the_first_path_entry_that_has_it(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = _shell_path(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, dirs), os.environ["PATH"]]))
    named = LocalBashExecutor(LocalShellOptions(executable="myshell"))
    result = await _run(named, "echo $BASH_VERSION")
    assert result.exit_code == 0 and result.stdout.text.strip(), result
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, dirs[:3])))
    with pytest.raises(ShellException, match="not on PATH"):
        await named.execute(named.resolve(ShellExecRequest("true")))


async def test_spawn_failure_settles_a_killed_handle_whose_result_raises(tether_home: Path) -> None:
    bogus = tether_home / "not-a-program"
    bogus.write_bytes(b"\x7fELF garbage, not a loadable image")
    bogus.chmod(0o755)
    executor = LocalBashExecutor(LocalShellOptions(executable=str(bogus)))
    execution = await executor.execute(executor.resolve(ShellExecRequest("true")))
    assert execution.status is ShellProcessStatus.KILLED
    await execution.done
    assert execution.observed.stderr.read_from(0).text.startswith("spawn failed: ")
    assert execution.kill() is False
    with pytest.raises(ShellException) as info:
        await execution.result()
    assert info.value.code == "SHELL_SPAWN"


async def test_timeout_kills_the_tree_and_reports_timed_out(tether_home: Path) -> None:
    token = unique_sleep_arg()
    executor = LocalBashExecutor(LocalShellOptions(grace_ms=3000))
    result = await _run(executor, f"sleep {token} & wait", timeout_ms=1000)
    assert result.timed_out and not result.aborted
    assert result.timeout_ms == 1000
    assert result.signal == "SIGTERM"
    assert alive_with(token) == []


async def test_on_expiry_none_keeps_running_until_killed(executor: LocalBashExecutor) -> None:
    token = unique_sleep_arg()
    spec = executor.resolve(
        ShellExecRequest(f"sleep {token}", timeout_ms=50, on_expiry=ShellExpiryPolicy.NONE)
    )
    execution = await executor.execute(spec)
    await asyncio.wait_for(_until(lambda: getattr(execution, "expired", False)), HANG_S)
    assert execution.status is ShellProcessStatus.RUNNING
    assert len(alive_with(token)) == 1
    assert execution.kill("no longer needed") is True
    await asyncio.wait_for(execution.done, HANG_S)
    assert execution.status is ShellProcessStatus.KILLED
    assert execution.kill() is False
    assert execution.kill_reason == "no longer needed"
    result = await execution.result()
    assert not result.timed_out and not result.aborted and result.signal == "SIGTERM"
    assert alive_with(token) == []


async def _until(predicate: object) -> None:
    while not predicate():  # type: ignore[operator]
        await asyncio.sleep(0.01)


async def test_expiry_before_spawn_settles_an_empty_timed_out_handle(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    executor = LocalBashExecutor()
    spec = executor.resolve(ShellExecRequest(f"touch {marker}", timeout_ms=1))
    assert wait_until(lambda: time.monotonic() > spec.resolved_at + 0.002)
    execution = await executor.execute(spec)
    assert execution.status is ShellProcessStatus.KILLED
    result = await execution.result()
    assert result.timed_out and result.exit_code is None
    assert result.stdout == ShellCollectedOutput() and result.stderr == ShellCollectedOutput()
    assert not marker.exists()


async def test_pre_fired_abort_raises_without_spawning(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    abort = AbortSignal()
    abort.fire("user pressed stop")
    executor = LocalBashExecutor()
    with pytest.raises(ShellAborted):
        await executor.execute(executor.resolve(ShellExecRequest(f"touch {marker}")), abort=abort)
    with pytest.raises(asyncio.CancelledError):  # ShellAborted is a cancellation
        await executor.execute(executor.resolve(ShellExecRequest(f"touch {marker}")), abort=abort)
    assert not marker.exists()


async def test_abort_while_running_kills_the_tree_and_marks_aborted(executor: LocalBashExecutor) -> None:
    token = unique_sleep_arg()
    abort = AbortSignal()
    execution = await executor.execute(
        executor.resolve(ShellExecRequest(f"sleep {token} & wait")), abort=abort
    )
    abort.fire("caller went away")
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.aborted and not result.timed_out
    assert alive_with(token) == []


async def test_result_is_memoized_and_flags_are_exclusive(executor: LocalBashExecutor) -> None:
    execution = await executor.execute(executor.resolve(ShellExecRequest("echo once")))
    first = await execution.result()
    assert await execution.result() is first
    with pytest.raises(ValueError, match="exclusive"):
        ShellRunResult(
            exit_code=None,
            signal=None,
            timed_out=True,
            aborted=True,
            timeout_ms=1,
            stdout=ShellCollectedOutput(),
            stderr=ShellCollectedOutput(),
        )


async def test_observed_reads_do_not_consume_and_read_output_does(executor: LocalBashExecutor) -> None:
    execution = await executor.execute(
        executor.resolve(ShellExecRequest("printf 'abcdefghij'; printf XY >&2", stdout_max_bytes=4))
    )
    await execution.done
    assert execution.observed.stdout.read_from(0).text == "ghij"
    assert execution.observed.stdout.read_from(0).text == "ghij"  # not consumed
    first = execution.read_output()
    assert (first.stdout, first.stderr, first.lossy) == ("ghij", "XY", True)
    second = execution.read_output()
    assert (second.stdout, second.stderr, second.lossy) == ("", "", False)
    result = await execution.result()
    assert result.stdout.truncated and result.stdout.text == "ghij"
    assert result.stdout.spill_path is not None
    with open(result.stdout.spill_path) as handle:  # noqa: ASYNC230 - a few bytes, in a test
        assert handle.read() == "abcdefghij"


async def test_thirty_planted_credentials_never_reach_the_child(
    executor: LocalBashExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = [
        f"{prefix}_{i}"
        for i, prefix in enumerate(
            ["API_KEY", "MY_SECRET", "GH_TOKEN", "DB_PASSWORD", "AWS_ACCESS", "X_CREDENTIAL"] * 4
        )
    ] + ["BASH_ENV", "ENV", "LD_PRELOAD", "PROMPT_COMMAND", "SSH_AUTH_SOCK", "DEPLOY_PAT"]
    assert len(planted) == 30
    for name in planted:
        monkeypatch.setenv(name, "hunter2-planted")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2-planted@db:5432/x")
    result = await _run(executor, "env", env={"EXPLICIT_TOKEN": "passed-on-purpose"})
    assert "hunter2-planted" not in result.stdout.text
    for name in planted:
        assert f"\n{name}=" not in "\n" + result.stdout.text
    assert "EXPLICIT_TOKEN=passed-on-purpose" in result.stdout.text
    assert "TETHER_SHELL=1" in result.stdout.text


async def test_two_hundred_concurrent_executions_leak_nothing(executor: LocalBashExecutor) -> None:
    from proc_probe import open_fd_set, zombie_children

    await _run(executor, "true")
    fds, zombies = open_fd_set(), zombie_children()
    executions = [
        await executor.execute(executor.resolve(ShellExecRequest(f"echo {i}; sleep 0.0{i % 10}")))
        for i in range(200)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(e.result() for e in executions)), 60)
    assert [r.stdout.text for r in results] == [f"{i}\n" for i in range(200)]
    assert open_fd_set() - fds == set()
    assert zombie_children() - zombies == set()


def test_old_and_excess_spill_files_are_pruned(tmp_path: Path) -> None:
    from tether.shell.options import prune_spill

    old = tmp_path / "old.stdout"
    old.write_text("x")
    os.utime(old, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    for i in range(5):
        (tmp_path / f"new{i}.stdout").write_text("y")
        os.utime(tmp_path / f"new{i}.stdout", (time.time() - 100 + i, time.time() - 100 + i))
    assert prune_spill(tmp_path, max_files=3) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new2.stdout", "new3.stdout", "new4.stdout"]


@pytest.mark.parametrize("configured", [True, False], ids=["spill_dir", "default"])
async def test_spill_files_are_pruned_while_the_process_runs_on_not_only_at_its_first_command(
    tether_home: Path, configured: bool
) -> None:
    # A `tether serve` lives for days: spill files it writes after its first command must be
    # bounded too (they were pruned once per process, so they piled up until a restart). The
    # default directory ($TETHER_HOME/spill) is the library's when no spill_dir is configured.
    spill = tether_home / "spill"
    executor = LocalBashExecutor(
        LocalShellOptions(cwd=str(tether_home), spill_dir=spill if configured else None, max_output_bytes=100)
    )
    first = await _run(executor, "seq 1 1000")
    assert first.stdout.spill_path is not None
    stale = time.time() - 3 * 86400
    for i in range(300):
        planted = spill / f"planted{i}.stdout"
        planted.write_text("x")
        os.utime(planted, (stale, stale))
    second = await _run(executor, "seq 1 1000")
    third = await _run(executor, "seq 1 1000")
    assert second.stdout.spill_path is not None and third.stdout.spill_path is not None
    assert await anyio.Path(third.stdout.spill_path).read_text() == "".join(f"{i}\n" for i in range(1, 1001))
    assert sorted(spill.glob("planted*")) == []


@pytest.mark.parametrize(
    "template",
    [
        "sleep {t} &",
        "setsid sleep {t} &",
        "( (sleep {t} &) & )",
        "(setsid sleep {t} > /dev/null 2>&1 &); echo hi",
    ],
)
async def test_background_children_never_hold_the_result_back(
    executor: LocalBashExecutor, template: str
) -> None:
    # The child sleeps 1000 s holding the pipes. Waiting for their EOF would end the call only at
    # its deadline (timed_out); 60 s is far from both that and any machine's slowest spawn.
    token = unique_sleep_arg()
    result = await _run(executor, template.format(t=token), timeout_ms=60_000)
    assert not result.timed_out and result.exit_code == 0
    assert alive_with(token) == []
