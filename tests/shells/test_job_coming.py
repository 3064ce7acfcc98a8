"""Whether a job the shell started has yet to take its terminal (``procinfo.job_coming``).

Read the same on both hosts: the local one from ``/proc`` (``foreground_job_coming``) and a remote
one from the facts script's answer (``PaneProcs.job_coming``), here run against the same real
terminal and process tree.
"""

from __future__ import annotations

import os
import pty
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hang import HANG_S
from proc_probe import hands_back_job
from tether.shells.hosts import procinfo
from tether.shells.hosts.ssh.procs import facts_script, parse_facts


def test_the_rule() -> None:
    waits = procinfo.WAITING_FOR_CHILD
    # The shell owns the terminal and waits for a child in a group of its own: on its way.
    assert procinfo.job_coming(10, 10, waits, [20]) is True
    # Not the shell's terminal (the job took it), or no such child, or the shell not waiting.
    assert procinfo.job_coming(10, 20, waits, [20]) is False
    assert procinfo.job_coming(10, 10, waits, [10]) is False  # a command substitution's child
    assert procinfo.job_coming(10, 10, waits, []) is False
    assert procinfo.job_coming(10, 10, "n_tty_read", [20]) is False  # `read` with a job in the background
    # A kernel that does not say what a process waits in: never coming.
    assert procinfo.job_coming(10, 10, None, [20]) is False
    assert procinfo.job_coming(10, 10, "0", [20]) is False
    assert procinfo.job_coming(10, 0, waits, [20]) is False


def test_the_remote_answer_carries_the_shells_wait() -> None:
    procs = parse_facts(
        "W do_wait\n"
        "S 10 (bash) S 1 10 10 34816 10 4194304 0 0 0 0 1 1 0 0\n"
        "S 20 (python3) S 10 20 10 34816 10 4194304 0 0 0 0 9 1 0 0\n",
        100,
    )
    assert procs.shell_wchan == "do_wait" and procs.job_coming(10) is True
    no_wchan = parse_facts("W \nS 10 (bash) S 1 10 10 34816 10 4194304 0 0 0 0 1 1 0 0\n", 100)
    assert no_wchan.shell_wchan is None and no_wchan.job_coming(10) is False


@contextmanager
def _terminal(script: str) -> Iterator[int]:
    """A terminal whose bash (job control on) runs ``script``; yields the shell's pid."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["bash", "--norc", "--noprofile", "-c", f"set -m; {script}; true"])
    try:
        yield pid
    finally:
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)


def _both(pid: int) -> tuple[bool, bool]:
    tty = os.readlink(f"/proc/{pid}/fd/0")
    out = subprocess.run(["sh", "-c", facts_script(pid, tty, terminal=False)], capture_output=True, text=True)
    return procinfo.foreground_job_coming(pid), parse_facts(out.stdout, os.sysconf("SC_CLK_TCK")).job_coming(
        pid
    )


def _settles_on(pid: int, expected: tuple[bool, bool], ready: str) -> tuple[bool, bool]:
    """The readings once the shell's process tree shows ``ready`` (a process of that name), read
    again until they are ``expected``."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        names = subprocess.run(["pgrep", "-P", str(pid), "-x", ready], capture_output=True).stdout
        if names and (seen := _both(pid)) == expected:
            return seen
        time.sleep(0.01)  # polling kernel state with a deadline
    return _both(pid)


def test_a_job_that_has_not_taken_the_terminal_is_coming() -> None:
    with _terminal(hands_back_job(60)) as pid:
        assert _settles_on(pid, (True, True), "python3") == (True, True)


def test_a_job_in_front_is_not_coming() -> None:
    with _terminal("sleep 30") as pid:
        assert _settles_on(pid, (False, False), "sleep") == (False, False)


def test_a_background_job_beside_read_is_not_coming() -> None:
    with _terminal("sleep 30 & read x") as pid:
        assert _settles_on(pid, (False, False), "sleep") == (False, False)


def test_wait_for_a_background_job_looks_the_same() -> None:
    """The look-alike a caller bounds by time: ``wait`` blocks the shell in ``wait4`` as well."""
    with _terminal("sleep 30 & wait") as pid:
        assert _settles_on(pid, (True, True), "sleep") == (True, True)
