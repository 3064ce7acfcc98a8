"""Whether a shell is still starting its line's command (``procinfo.starting``), on real processes.

A python process in a terminal stands in for the shell: it works in front itself, or it forks a
child that takes the terminal and only later becomes the command (``exec``), as bash does.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

from hang import HANG_S
from proc_probe import in_terminal
from tether.shells.hosts import procinfo
from tether.shells.hosts.ssh.procs import parse_facts

_FORKS = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # ignored, not caught: the mask stays the shell's
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpgrp())
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    os.execvp("sleep", ["sleep", "30"])
os.waitpid(pid, 0)
"""


def test_the_rule() -> None:
    # The shell in front: starting while it works, not while it waits (a builtin `read`).
    assert procinfo.starting(True, "R", None) is True
    assert procinfo.starting(True, "D", None) is True
    assert procinfo.starting(True, "S", None) is False
    # Something else in front: starting only while it is the shell's fork, not yet the command.
    assert procinfo.starting(False, "S", True) is True
    assert procinfo.starting(False, "R", False) is False
    assert procinfo.starting(False, "S", None) is False  # a host that cannot tell


def test_a_remote_host_tells_the_shell_working_in_front() -> None:
    """From the facts script's answer: the shell's own state only (a fork is not told apart)."""
    line = "S 10 (bash) {} 1 10 10 34816 {} 4194304 0 0 0 0 1 1 0 0\n"
    assert parse_facts(line.format("R", 10), 100).starting(10) is True
    assert parse_facts(line.format("S", 10), 100).starting(10) is False
    job = "S 20 (sleep) S 10 20 10 34816 20 4194304 0 0 0 0 0 0 0 0\n"
    assert parse_facts(line.format("S", 20) + job, 100).starting(10) is False


def _shell(code: str, *args: str) -> AbstractContextManager[int]:
    """A terminal whose session leader (the "shell") runs python ``code``; yields its pid."""
    return in_terminal([sys.executable, "-c", code, *args])


def _reads(pid: int, expected: bool, front: str) -> bool:
    """``shell_starting`` once ``front`` (a name) leads the terminal's foreground group, read again
    until it is ``expected``."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        fg = procinfo.foreground(pid)
        if fg.shell_in_front == (front == "") and (fg.shell_in_front or fg.command == front):
            seen = procinfo.shell_starting(pid)
            if seen == expected:
                return seen
        time.sleep(0.01)  # polling kernel state with a deadline
    return procinfo.shell_starting(pid)


def test_a_fork_in_front_is_starting_until_it_becomes_the_command(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with _shell(_FORKS, str(gate)) as pid:
        name = Path(sys.executable).name[:15]
        assert _reads(pid, True, name) is True  # the fork holds the terminal, still the shell
        gate.touch()
        assert _reads(pid, False, "sleep") is False  # it became `sleep`


def test_the_shell_in_front_is_starting_while_it_works() -> None:
    with _shell("while True: pass") as pid:
        assert _reads(pid, True, "") is True
    with _shell("import time; time.sleep(30)") as pid:
        assert _reads(pid, False, "") is False
