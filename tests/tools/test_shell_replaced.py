"""A shell whose bash was replaced by another program (``exec`` in ~/.bashrc or typed) is told
apart from a bash that lost its integration: nothing of tether's is typed into the program, and a
run says what happened and how to go on."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from shell_harness import call, open_shell, run, shell_client, tmux

from hang import HANG_MS
from proc_probe import wait_until

REPLACED = "replaced bash with it (exec)"


def _own_tmux(socket: Path, *args: str) -> str:
    """A command on the user's own tmux server, as they would run it."""
    return subprocess.run(["tmux", "-S", str(socket), *args], capture_output=True, text=True).stdout


def _replaced_by(home: Path, shell: str, program: str) -> bool:
    """Wait until the pane's own process is ``program`` (the exec has happened)."""
    current = ("display", "-p", "-t", shell, "#{pane_current_command}")
    return wait_until(lambda: tmux(home, *current) == program + "\n")


def _exit_run(shell: str, command: str) -> dict[str, object]:
    return {
        "tasks": [
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": command},
                "wait": {"kind": "exit", "timeoutMs": 2000},
            }
        ]
    }


async def _refused_as_replaced(client: Any, shell: str, program: str) -> None:
    """A run in ``shell`` is refused, naming ``program`` as what replaced its bash."""
    text, data = await call(client, "shell_run", _exit_run(shell, "echo hi"))
    task: dict[str, Any] = data["tasks"][0]
    assert not task["ok"] and task["errorCode"] == "REFUSED", text
    assert f"the shell itself is now {program}" in task["error"] and REPLACED in task["error"], text


async def test_a_bashrc_that_execs_tmux_gets_nothing_typed_into_it(tether_home: Path, tmp_path: Path) -> None:
    # A common ~/.bashrc: start tmux unless inside it. tether's start-up file unsets TMUX first, so
    # the user's tmux took the pane; the integration's install line was then typed into a shell of
    # the user's own tmux session (one `new-session -A` may share with a terminal of theirs).
    user = tmp_path / "user"
    user.mkdir()
    server = tmp_path / "own-tmux.sock"
    (user / ".bashrc").write_text(f'[ -z "$TMUX" ] && exec tmux -S {server} new-session -A -s main\n')
    try:
        async with shell_client(tether_home, extra_env={"HOME": str(user)}) as client:
            shell = await open_shell(client)
            assert _replaced_by(tether_home, shell, "tmux")
            await _refused_as_replaced(client, shell, "tmux")
            screen = _own_tmux(server, "capture-pane", "-p", "-t", "main")
            assert "--integration" not in screen and "echo hi" not in screen, screen
    finally:
        _own_tmux(server, "kill-server")


async def test_a_bash_replaced_by_sh_is_said_so(tether_home: Path, tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / ".bashrc").write_text("exec sh\n")
    async with shell_client(tether_home, extra_env={"HOME": str(user)}) as client:
        shell = await open_shell(client)
        assert _replaced_by(tether_home, shell, "sh")
        await _refused_as_replaced(client, shell, "sh")


async def test_an_exec_typed_in_a_shell_is_said_so_at_the_next_run(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        assert (await run(client, shell, "echo ready"))["exitCode"] == 0
        await run(client, shell, "exec sh", wait={"kind": "none"})
        assert _replaced_by(tether_home, shell, "sh")
        await _refused_as_replaced(client, shell, "sh")


async def test_a_run_that_replaces_bash_ends_its_wait_saying_so(tether_home: Path) -> None:
    # `exec sh` typed as a run: bash, whose events end a run, is gone. The wait for the run's exit
    # went on to its timeout, then said only "timeout".
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        assert (await run(client, shell, "echo ready"))["exitCode"] == 0
        task = await run(client, shell, "exec sh", wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert task["ok"] and task["met"] is False and task["unmet"] == "shell replaced by sh", task
        assert "the shell itself is now sh" in "\n".join(task["lines"]), task
        # The program in bash's place is said so at once by the next run too.
        await _refused_as_replaced(client, shell, "sh")


async def test_a_wait_on_output_follows_the_program_that_replaced_bash(tether_home: Path) -> None:
    # What the program prints can still meet a wait that is not for the run's end.
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        command = "exec sh -c 'sleep 1; echo late-$((6*7)); exec sh'"
        task = await run(
            client, shell, command, wait={"kind": "match", "pattern": "late-42", "timeoutMs": HANG_MS}
        )
        assert task["met"] is True, task
