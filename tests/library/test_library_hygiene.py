"""A program using the library leaves nothing running when it ends: normally, by an exception, by
Ctrl-C, or having forgotten to close. Each program below is a real interpreter; its command traps
``SIGTERM`` and writes a file, so the file proves tether stopped it (a container's end would
``SIGKILL`` it silently), and the program's own exit proves no thread held it up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tether
from hang import HANG_S

SRC = Path(__file__).resolve().parents[2] / "src"


def _job(marks: Path) -> str:
    """A command that says when it has started and, when stopped by ``SIGTERM``, that it was."""
    return (
        f"trap 'echo stopped > {marks}/stopped; exit 0' TERM; echo started; echo started > {marks}/started; "
        "sleep 600 & wait"
    )


def _program(home: Path, body: str, *, dev: bool = True) -> subprocess.Popen[str]:
    """``body`` run by a fresh interpreter, in Python's development mode (ResourceWarnings shown)
    unless ``dev`` is false (its asyncio debug mode prints slow callbacks on stderr)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "TETHER_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, *(["-X", "dev"] if dev else []), "-c", textwrap.dedent(body)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt_when_started(marks: Path) -> str:
    """Program text: a thread that sends the program SIGINT once its command has started."""
    return f"""
        import os, signal, threading, time
        def interrupt():
            deadline = time.monotonic() + {HANG_S}
            while not os.path.exists("{marks}/started") and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
    """


@pytest.mark.parametrize("ending", ["normally", "by an exception"])
def test_async_with_stops_the_background_jobs(tether_home: Path, tmp_path: Path, ending: str) -> None:
    raising = "raise RuntimeError('the program failed')" if ending == "by an exception" else "pass"
    program = _program(
        tether_home,
        f"""
        import asyncio, tether
        async def main():
            async with tether.Tether() as t:
                job = await t.call("bash", {{"command": {_job(tmp_path)!r}, "description": "trap",
                                              "run_in_background": True}})
                await t.call("job_output", {{"jobId": job.structured["jobId"], "timeoutMs": {HANG_S * 1000}}})
                {raising}
        asyncio.run(main())
        """,
    )
    _out, err = program.communicate(timeout=HANG_S)
    assert (tmp_path / "started").exists(), err
    assert (tmp_path / "stopped").read_text() == "stopped\n"
    if ending == "normally":
        assert program.returncode == 0 and "Warning" not in err, err
    else:
        assert program.returncode == 1 and err.rstrip().endswith("RuntimeError: the program failed"), err


def test_a_forgotten_blocking_tether_is_closed_at_exit(tether_home: Path, tmp_path: Path) -> None:
    program = _program(
        tether_home,
        f"""
        import tether
        t = tether.BlockingTether()
        job = t.call("bash", {{"command": {_job(tmp_path)!r}, "description": "trap",
                               "run_in_background": True}})
        t.call("job_output", {{"jobId": job.structured["jobId"], "timeoutMs": {HANG_S * 1000}}})
        print("leaving without close")
        """,
    )
    out, err = program.communicate(timeout=HANG_S)  # no thread of tether's holds the exit up
    assert out == "leaving without close\n" and program.returncode == 0, err
    assert (tmp_path / "stopped").read_text() == "stopped\n"


@pytest.mark.parametrize("face", ["BlockingTether", "Tether"])
def test_ctrl_c_during_a_call_stops_its_command(tether_home: Path, tmp_path: Path, face: str) -> None:
    call = {"command": _job(tmp_path), "description": "trap"}
    if face == "BlockingTether":
        body = f"""
            import tether
            with tether.BlockingTether() as t:
                t.call("bash", {call!r})
            """
    else:
        body = f"""
            import asyncio, tether
            async def main():
                async with tether.Tether() as t:
                    await t.call("bash", {call!r})
            asyncio.run(main())
            """
    program = _program(
        tether_home, textwrap.dedent(_interrupt_when_started(tmp_path)) + textwrap.dedent(body)
    )
    _out, err = program.communicate(timeout=HANG_S)
    assert program.returncode == -signal.SIGINT, err
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert (tmp_path / "stopped").read_text() == "stopped\n"


def test_the_programs_own_orphans_are_not_adopted(tether_home: Path) -> None:
    """tether makes its own processes child subreapers; a program that embeds it must stay as it
    was, or every orphan of its own children would become a zombie of its process that nothing
    reaps — while a ``Tether`` is open, and after it is closed."""
    program = _program(
        tether_home,
        """
        import os, subprocess, tether

        def orphan_parent():
            # sh starts a sleep and exits: the sleep is an orphan, handed to the nearest subreaper.
            pid = int(subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
                                     capture_output=True, text=True).stdout)
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            os.kill(pid, 9)
            return "the program" if parent == os.getpid() else "another"

        with tether.BlockingTether() as t:
            t.call("bash", {"command": "sh -c 'sleep 0 &'", "description": "a command with an orphan"})
            print(orphan_parent())
        print(orphan_parent())
        """,
    )
    out, err = program.communicate(timeout=HANG_S)
    assert program.returncode == 0, err
    assert out.split("\n") == ["another", "another", ""]


def test_a_program_named_like_the_command_keeps_its_ctrl_c(tether_home: Path, tmp_path: Path) -> None:
    """Only the ``tether`` command ends at once on Ctrl-C; a program of its own whose name merely
    ends in "tether" gets Python's ``KeyboardInterrupt``, so its ``finally`` and clean-up run."""
    program = tmp_path / "my-tether"
    program.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            """
            import os, signal, time
            import tether
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(600)
            except KeyboardInterrupt:
                print("interrupted, cleaning up")
            """
        ),
        encoding="utf-8",
    )
    program.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(SRC), "TETHER_HOME": str(tether_home)}
    done = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=HANG_S)
    assert (done.returncode, done.stdout) == (0, "interrupted, cleaning up\n"), done.stderr


def test_the_programs_signal_handlers_are_left_as_they_were(tether_home: Path) -> None:
    def handlers() -> dict[int, object]:
        return {
            sig: signal.getsignal(sig)
            for sig in signal.valid_signals()
            if sig not in (signal.SIGKILL, signal.SIGSTOP)
        }

    before = handlers()
    with tether.BlockingTether() as t:
        t.call("bash", {"command": "true", "description": "a command"})
        opened = t.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = opened.structured["tasks"][0]["shell"]
        run = {"kind": "run", "command": "true"}
        t.call(
            "shell_run", {"tasks": [{"target": {"sessions": shell}, "action": run, "wait": {"kind": "exit"}}]}
        )
        assert handlers() == before
        t.call("shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]})
    assert handlers() == before


def test_an_internal_error_is_raised_not_printed(tether_home: Path) -> None:
    """A program without a logging configuration gets the ``INTERNAL`` error, with its cause, and
    no traceback of tether's on its stderr."""
    program = _program(
        tether_home,
        """
        import tether
        from tether.tools.registry import ToolDef

        async def broken(arguments, ctx):
            raise KeyError("inside")

        with tether.BlockingTether() as t:
            tool = ToolDef(name="broken", description="", input_schema={}, handler=broken)
            t._tether._catalog.registry.add(tool)
            try:
                t.call("broken", {})
            except tether.TetherError as error:
                print(error.code, type(error.__cause__).__name__)
        """,
        dev=False,
    )
    out, err = program.communicate(timeout=HANG_S)
    assert (program.returncode, out, err) == (0, "INTERNAL KeyError\n", "")
