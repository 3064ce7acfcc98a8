"""When a run has ended, through the MCP client: decided from the log, never ahead of it.

The log reaches disk through tmux and ``pipe-pane``; on a busy machine it lags behind the shell.
These tests make the lag as long as they like by stopping the log's writer (SIGSTOP), so what a
loaded machine does by chance happens here every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from shell_harness import open_shell, run, shell_client

from hang import HANG_MS, HANG_S
from tether.shells.wakeups import LogWatcher

STOPPED_FOR_S = 2.0  # how long the test watches for a premature answer (none may come, ever)


def _log_writer(log: Path) -> int:
    """The ``cat >> LOG`` process tmux's pipe-pane feeds (its stdout is the log; the ``sh`` that
    runs it may hold the log as its stdout too)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                writes = os.readlink(f"/proc/{entry}/fd/1") == str(log)
                if writes and Path(f"/proc/{entry}/comm").read_text().strip() == "cat":
                    return int(entry)
    raise AssertionError(f"no process writes {log}")


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _log_holds(logs: Path, shell: str, needle: bytes) -> None:
    """Return once the shell's log contains ``needle`` (woken by inotify, not by a timer)."""
    watcher = LogWatcher(logs, cap=1 << 40)
    watcher.start()
    waker = watcher.waker(shell)
    try:
        while needle not in (logs / f"{shell}.log").read_bytes():
            await waker.wait()
            waker.clear()
    finally:
        watcher.drop(shell, waker)
        watcher.close()


@pytest.mark.parametrize("ending", ["exec bash", "true"])
async def test_an_exit_status_is_never_concluded_ahead_of_the_log(
    tether_home: Path, tmp_path: Path, ending: str
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        logs = tether_home / "logs"
        writer = _log_writer(logs / f"{shell}.log")
        command = f"echo started-$((6*7)); read -r _ < {gate}; {ending}"
        call = asyncio.create_task(run(client, shell, command, wait={"kind": "exit", "timeoutMs": HANG_MS}))
        await _log_holds(logs, shell, b"started-42")  # the run began and the log says so
        fd = await asyncio.to_thread(os.open, gate, os.O_WRONLY)  # `read` has the fifo open
        with _stopped(writer):
            os.write(fd, b"go\n")
            os.close(fd)
            # The command ends and the shell is back at its prompt, but its end marker is stuck
            # behind the stopped writer: no answer may come while it is.
            done, _ = await asyncio.wait({call}, timeout=STOPPED_FOR_S)
            assert not done, f"answered while the log lagged: {call.result()}"
        out = await call
        assert (out["exitCode"], out["met"]) == (0, True), out
        assert (await run(client, shell, "(exit 18)"))["exitCode"] == 18


async def test_exec_bash_keeps_exit_codes_with_a_bashrc_that_prepends_a_prompt_hook(
    tether_home: Path, tmp_path: Path
) -> None:
    # What version managers (pyenv, direnv, …) do in ~/.bashrc: a slow start-up, then their own
    # hook in front of PROMPT_COMMAND. The new shell of `exec bash` reads it, not tether's rcfile.
    user = tmp_path / "user"
    user.mkdir()
    (user / ".bashrc").write_text(
        "__slow_start=$(seq 1 20000 | tail -n 1)\n"
        "__user_hook() { local s=$?; : > /dev/null; return $s; }\n"
        'PROMPT_COMMAND="__user_hook${PROMPT_COMMAND:+;$PROMPT_COMMAND}"\n'
    )
    async with shell_client(tether_home, extra_env={"HOME": str(user)}) as client:
        shell = await open_shell(client)
        for _ in range(3):
            assert (await run(client, shell, "exec bash"))["exitCode"] == 0
            assert (await run(client, shell, "(exit 7)"))["exitCode"] == 7


async def test_an_exit_wait_ends_at_the_line_not_after_the_prompt_hooks(
    tether_home: Path, tmp_path: Path
) -> None:
    # A prompt hook of the user's that holds the shell (here on a fifo nobody writes yet): the run
    # waited for the command's exit, which is over before the hooks run, so it has its answer while
    # the hook still holds the shell; the next command waits for the prompt the hooks then draw.
    gate, flag = tmp_path / "gate", tmp_path / "flag"
    os.mkfifo(gate)
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        hook = f"[[ -e {flag} ]] && read -r _ < {gate}"
        assert (await run(client, shell, f"PROMPT_COMMAND+=({hook!r})"))["exitCode"] == 0
        out = await run(client, shell, f"touch {flag}; echo ran; (exit 5)")
        assert (out["exitCode"], out["met"]) == (5, True), out
        assert out["lines"] == ["ran"], out
        # The hook holds the shell on the gate: a writer finds a reader there once the hooks got
        # that far (the answer came before they ran; until then, ENXIO).
        with anyio.fail_after(HANG_S):
            while True:
                try:
                    fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENXIO:
                        raise
                await anyio.sleep(0.01)
        flag.unlink()
        os.write(fd, b"go\n")
        os.close(fd)
        after = await run(client, shell, "echo after")
        assert (after["exitCode"], after["met"]) == (0, True), after
        assert after["lines"] == ["after"], after


async def test_an_exit_status_stays_the_lines_when_a_hook_is_put_before_tethers(tether_home: Path) -> None:
    # A scalar assignment puts the user's hook first: its status is what tether's first hook then
    # sees, so the line's own status comes from the prompt (bash restores $? there).
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(client, shell, 'PROMPT_COMMAND="(exit 7);$PROMPT_COMMAND"')
        assert out["exitCode"] == 0, out
        for command, code in (("false", 1), ("(exit 3)", 3), ("true", 0)):
            assert (await run(client, shell, command))["exitCode"] == code, command


async def test_a_shell_with_nounset_from_its_bashrc_runs_and_reports(
    tether_home: Path, tmp_path: Path
) -> None:
    # `set -u` in ~/.bashrc (and PS0 unset, as bash leaves it): the integration read `$PS0` bare,
    # so every prompt failed with "PS0: unbound variable" and every run was refused.
    user = tmp_path / "user"
    user.mkdir()
    (user / ".bashrc").write_text("set -u -o pipefail\nunset PS0 PS2\n")
    async with shell_client(tether_home, extra_env={"HOME": str(user)}) as client:
        shell = await open_shell(client)
        out = await run(client, shell, "echo hi; [[ -o nounset ]] && echo nounset-on")
        assert (out["exitCode"], out["lines"]) == (0, ["hi", "nounset-on"]), out
        assert (await run(client, shell, "(exit 7)"))["exitCode"] == 7
        # The new shell reads ~/.bashrc again, and the integration is installed after it.
        assert (await run(client, shell, "exec bash"))["exitCode"] == 0
        out = await run(client, shell, "for i in 1 2; do echo $i; done | cat")
        assert (out["exitCode"], out["lines"]) == (0, ["1", "2"]), out
