"""Whether what is in front of a terminal works (``procinfo.front_busy``), on real processes.

The rule is read the same on both hosts: the local one from ``/proc`` (``foreground_busy``) and a
remote one from the facts script's answer (``PaneProcs.front_busy``), here run against the same
real terminal and process tree.
"""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import AbstractContextManager

from hang import HANG_S
from proc_probe import in_terminal
from tether.shells.hosts import procinfo
from tether.shells.hosts.ssh.procs import facts_script, parse_facts


def test_the_rule() -> None:
    # The shell in front: busy while it runs (its prompt hooks), not while it reads a line.
    assert procinfo.front_busy("R", True, []) is True
    assert procinfo.front_busy("S", True, []) is False
    # A program in front: busy while any process of its group runs or waits for the disk.
    assert procinfo.front_busy("S", False, ["S", "R"]) is True
    assert procinfo.front_busy("S", False, ["D"]) is True
    assert procinfo.front_busy("S", False, ["S", "S"]) is False
    assert procinfo.front_busy("S", False, ["T"]) is False
    # Its group ended: zombies not yet reaped, or nothing left while the shell takes the terminal.
    assert procinfo.front_busy("S", False, ["Z"]) is True
    assert procinfo.front_busy("R", False, []) is True
    assert procinfo.front_busy("S", False, []) is False


def test_the_remote_answer_carries_each_process_state() -> None:
    """Both shapes of the facts script's answer: ``/proc`` stat lines, and ``ps`` (no ``/proc``)."""
    stat = parse_facts(
        "S 10 (bash) S 1 10 10 34816 20 4194304 0 0 0 0 1 1 0 0\n"
        "S 20 (py thon) R 10 20 10 34816 20 4194304 0 0 0 0 90 10 0 0\n",
        100,
    )
    assert [(p.name, p.state) for p in stat.procs] == [("bash", "S"), ("py thon", "R")]
    assert stat.front_busy(10) is True
    ps = parse_facts(
        "P    10     1    10    20 00:00:01 Ss+ -bash\nP    20    10    20    20 01:02 T+ vim\n", 100
    )
    assert [(p.name, p.state) for p in ps.procs] == [("-bash", "S"), ("vim", "T")]
    assert ps.front_busy(10) is False  # a stopped job is not working


def _pane(program: str) -> AbstractContextManager[int]:
    """A terminal whose shell (job control on) runs ``program`` as its foreground job."""
    return in_terminal(["sh", "-c", f"set -m; python3 -c {program!r}; sleep 30"])


def _both(pid: int) -> tuple[bool, bool]:
    """(the local reading, the remote script's reading) once python runs in front of ``pid``."""
    deadline = time.monotonic() + HANG_S
    while True:
        tty = os.readlink(f"/proc/{pid}/fd/0")
        out = subprocess.run(
            ["sh", "-c", facts_script(pid, tty, terminal=False)], capture_output=True, text=True
        )
        procs = parse_facts(out.stdout, os.sysconf("SC_CLK_TCK"))
        _, in_front, command = procs.foreground(pid)
        if (not in_front and command == "python3") or time.monotonic() > deadline:
            break
        time.sleep(0.01)  # polling kernel state with a deadline
    assert command == "python3" and not in_front
    return procinfo.foreground_busy(pid), procs.front_busy(pid)


def _settles_on(pid: int, expected: tuple[bool, bool]) -> tuple[bool, bool]:
    """The readings, read again until they are ``expected`` (python's own start is busy too)."""
    deadline = time.monotonic() + HANG_S
    while (seen := _both(pid)) != expected and time.monotonic() < deadline:
        time.sleep(0.01)  # polling kernel state with a deadline
    return seen


def test_a_program_that_computes_is_busy() -> None:
    with _pane("while True: pass") as pid:
        assert _settles_on(pid, (True, True)) == (True, True)


def test_a_program_that_waits_is_not_busy() -> None:
    with _pane("import time; time.sleep(30)") as pid:
        assert _settles_on(pid, (False, False)) == (False, False)
