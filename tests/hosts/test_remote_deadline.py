"""A wait's own timeout inside a connection gone silent: the call answers at its timeout, as a
timeout that says the host was silent, and the next call once the host answers again works."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from sshd_harness import RemoteHosts, _descendants, process_running

from hang import HANG_S
from tether.config import load_config
from tether.shells import SshHost
from tether.tools.registry import CallContext
from tether.tools.shells import ShellTools


def _task(shell: str, command: str, wait: dict[str, Any]) -> dict[str, Any]:
    return {"target": {"sessions": shell}, "action": {"kind": "run", "command": command}, "wait": wait}


@pytest.mark.parametrize("showing", ["since", "tail"])
async def test_a_wait_whose_timeout_falls_inside_a_stall_answers_with_its_timeout(
    tether_home: Path, remote: RemoteHosts, showing: str
) -> None:
    # The host's side of the connection stops answering (its sshd processes stopped) while a
    # shell_run waits 2 s for its command: the wait's questions to the host go unanswered. The
    # watchdog calls the connection lost only after 15 s (tmux.control.ANSWER_S); the call answers
    # with its own timeout, saying what is not known, rather than hold the caller 15 s.
    box = remote.add("box-a", timeout=3)
    tools = ShellTools(load_config(tether_home))
    ctx = CallContext(actor="t")
    stopped: list[int] = []
    try:
        opened = await tools.open({"tasks": [{"action": {"kind": "open", "host": "box-a"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        host = tools.shells().hosts["box-a"]
        assert isinstance(host, SshHost)
        mirror = host.log_of(shell)
        results: dict[str, Any] = {}

        async def running() -> None:
            wait = {"kind": "exit", "timeoutMs": 2000}
            task = {**_task(shell, "echo started; sleep 41.5", wait), "output": {"showing": showing}}
            out = await tools.run({"tasks": [task]}, ctx)
            results["task"] = out.structured["tasks"][0]

        async with anyio.create_task_group() as tg:
            tg.start_soon(running)
            # Stalled once the command runs there and its keys were answered (nothing owed to
            # the call but the wait's own questions).
            with anyio.fail_after(HANG_S):
                while not (
                    process_running("sleep\x0041.5")
                    and b"started" in mirror.read_bytes()
                    and not host.control._pending
                ):
                    await anyio.sleep(0.01)
            assert box.sshd.proc is not None
            stopped = _descendants(box.sshd.proc.pid)
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
        task = results["task"]
        # A timeout, not CONNECTION_LOST: the connection is silent, not known to be gone.
        assert task["ok"] is True and task["errorCode"] is None, task
        assert task["met"] is False and task["unmet"] == "timeout" and task["exitCode"] is None, task
        note = task["lines"][-1]
        assert note.startswith("[wait exit: timeout after 2000 ms (nothing was killed; host box-a had not"), (
            note
        )
        assert "may be missing here" in note, note
        # The output as far as the log has it (the screen is the silent host's tmux's).
        assert "started" in task["lines"], task
        if showing == "tail":
            assert task["lines"][-2] == "[shown from the log, not the tail: the host did not answer in time]"
        # The host answers again: the next calls work on the same shell.
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        send = {"target": {"sessions": shell}, "action": {"kind": "send", "text": "", "keys": ["C-c"]}}
        await tools.send({"tasks": [send]}, ctx)
        out = await tools.run(
            {"tasks": [_task(shell, "echo back", {"kind": "exit", "timeoutMs": 30_000})]}, ctx
        )
        task = out.structured["tasks"][0]
        assert task["exitCode"] == 0 and task["lines"] == ["back"], task
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await tools.aclose()


async def test_a_read_wait_whose_timeout_falls_inside_a_stall_answers_from_the_log(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host goes silent at the wait's first question to it (what is in front of the shell):
    # shell_read answers with its timeout, and its view (tail, the default: tmux's screen) comes
    # from the log instead of the silent host.
    box = remote.add("box-a", timeout=3)
    tools = ShellTools(load_config(tether_home))
    ctx = CallContext(actor="t")
    stopped: list[int] = []
    try:
        opened = await tools.open({"tasks": [{"action": {"kind": "open", "host": "box-a"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        host = tools.shells().hosts["box-a"]
        assert isinstance(host, SshHost)
        await tools.run({"tasks": [_task(shell, "echo started; sleep 41.75", {"kind": "none"})]}, ctx)
        with anyio.fail_after(HANG_S):
            while not process_running("sleep\x0041.75") or b"started" not in host.log_of(shell).read_bytes():
                await anyio.sleep(0.01)
        real = host.foreground

        async def foreground(*args: Any) -> Any:
            nonlocal stopped
            if not stopped:
                assert box.sshd.proc is not None
                stopped = _descendants(box.sshd.proc.pid)
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
            return await real(*args)

        monkeypatch.setattr(host, "foreground", foreground)
        wait = {"kind": "exit", "timeoutMs": 2000}
        out = await tools.read(
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read"}, "wait": wait}]}, ctx
        )
        read = out.structured["tasks"][0]
        assert stopped, "the wait never asked the host"
        assert read["ok"] is True and read["met"] is False and read["unmet"] == "timeout", read
        assert "started" in read["lines"], read
        shown = "[shown from the log (history), not the tail: the host did not answer in time]"
        assert shown in read["lines"], read
        assert any("host box-a had not answered" in line for line in read["lines"]), read
        monkeypatch.undo()
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        send = {"target": {"sessions": shell}, "action": {"kind": "send", "text": "", "keys": ["C-c"]}}
        await tools.send({"tasks": [send]}, ctx)
        back = _task(shell, "echo back", {"kind": "exit", "timeoutMs": 30_000})
        out = await tools.run({"tasks": [back]}, ctx)
        task = out.structured["tasks"][0]
        assert task["exitCode"] == 0 and task["lines"] == ["back"], task
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await tools.aclose()
