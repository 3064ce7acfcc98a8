"""What runs in a pane, read from ``/proc`` and the pane's terminal without asking tmux.

Invariant: every function here is a cheap, side-effect-free read (microseconds), so the wait engine
may call it on each output event. A shell is *at its prompt* when the terminal's foreground process
group is the shell's own and the terminal is in non-canonical mode (readline reading a command
line); a builtin ``read`` keeps the shell in the foreground but the terminal canonical. It is
*waiting at its prompt* (``waiting_at_prompt``) when, besides, no typed input is queued on the
terminal for it: a line just typed sits there until readline takes it and hands the terminal back
(canonical) to run it.

What is in front is *busy* (``front_busy``) while it works — a process of the terminal's foreground
group runs or waits for the disk — or has just ended and the shell has not yet taken its terminal
back: text typed to a program is answered ("idle") only once that program waits again.

The shell is still *starting* what its running line runs (``starting``) while it works in front of
its terminal itself (expanding the line, forking), or while what is in front is a fork of it that
has not yet become the command: it still has the shell's command line and catches the signals the
shell catches. A ``C-c`` in either gap reaches a bash handler, and the command never sees it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True, kw_only=True)
class Foreground:
    pgid: int  # the terminal's foreground process group (0 = unknown)
    shell_in_front: bool  # the shell itself owns the terminal
    # Name of the foreground group's leader ("bash" when the shell is in front), or of its first
    # member still there once the leader ended (what holds the terminal after `seq 9 | less`).
    command: str


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    close = data.rfind(")")
    return [data[: close + 1], *data[close + 2 :].split()]


# Process states (``/proc/PID/stat``, ``ps -o stat``) of a process that works: running or runnable,
# or in uninterruptible (disk) sleep (``D``; ``U`` in BSD's ``ps``). A zombie or a dead one has ended.
BUSY_STATES = frozenset("RDU")
ENDED_STATES = frozenset("ZX")


def front_busy(shell_state: str, in_front: bool, members: list[str]) -> bool:
    """Whether what is in front of a terminal works: ``shell_state`` is the shell's process state,
    ``members`` the states of the foreground group's processes (when the shell is not in front).

    A group whose processes have all ended (zombies the shell has not reaped) or that the shell is
    still taking the terminal back from (nothing left of it, the shell itself running) is busy: the
    shell's prompt is about to come."""
    if in_front:
        return shell_state in BUSY_STATES
    live = [state for state in members if state not in ENDED_STATES]
    if live:
        return any(state in BUSY_STATES for state in live)
    return bool(members) or shell_state in BUSY_STATES


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def foreground(shell_pid: int) -> Foreground:
    fields = _stat_fields(shell_pid)
    if fields is None or len(fields) < 7:
        return Foreground(pgid=0, shell_in_front=False, command="")
    # /proc/PID/stat after "pid (comm)": state ppid pgrp session tty_nr tpgid …
    tpgid = int(fields[6])
    if tpgid <= 0:
        return Foreground(pgid=0, shell_in_front=False, command="")
    in_front = tpgid == int(fields[3])
    # The shell's own name is the stat line's "(comm)": the same field /proc/PID/comm holds.
    command = fields[0][fields[0].find("(") + 1 : -1] if in_front else _comm(tpgid)
    if not command and not in_front:
        # The group's leader (a pipeline's first command: `seq 1 200 | less`) has ended while the
        # rest of the group holds the terminal: the first member still there names it.
        command = next(
            (name for pid in sorted(_descendants(shell_pid)) if (name := _member_name(pid, tpgid))), ""
        )
    return Foreground(pgid=tpgid, shell_in_front=in_front, command=command)


def _member_name(pid: int, pgid: int) -> str:
    """The name of process ``pid`` if it is a live member of process group ``pgid``, else ""."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 4 or int(fields[3]) != pgid or fields[1] in ENDED_STATES:
        return ""
    return fields[0][fields[0].find("(") + 1 : -1]


def foreground_busy(shell_pid: int) -> bool:
    """``front_busy`` for the shell ``shell_pid`` (not busy when its ``/proc`` cannot be read)."""
    fields = _stat_fields(shell_pid)
    if fields is None or len(fields) < 7:
        return False
    # /proc/PID/stat after "pid (comm)": state ppid pgrp session tty_nr tpgid …
    state, pgrp, tpgid = fields[1], int(fields[3]), int(fields[6])
    if tpgid <= 0 or tpgid == pgrp:
        return front_busy(state, True, [])
    members: list[str] = []
    for pid in _descendants(shell_pid):
        child_fields = _stat_fields(pid)
        if child_fields is not None and len(child_fields) > 3 and int(child_fields[3]) == tpgid:
            members.append(child_fields[1])
    return front_busy(state, False, members)


def starting(in_front: bool, shell_state: str, front_is_fork: bool | None) -> bool:
    """Whether the shell is still starting its line's command: it works in front itself, or the
    process in front is its fork not yet turned into the command (``None``: cannot be told on
    this host, taken as no)."""
    return shell_state in BUSY_STATES if in_front else bool(front_is_fork)


def shell_starting(shell_pid: int) -> bool:
    """``starting`` for the shell ``shell_pid``, read from ``/proc``."""
    fields = _stat_fields(shell_pid)
    if fields is None or len(fields) < 7 or int(fields[6]) <= 0:
        return False
    state, pgrp, tpgid = fields[1], int(fields[3]), int(fields[6])
    if tpgid == pgrp:
        return starting(True, state, None)
    # bash makes the command's first process the leader of its group: the leader is the fork.
    leader = _stat_fields(tpgid)
    is_child = leader is not None and len(leader) > 2 and int(leader[2]) == shell_pid
    fork = is_child and _caught(tpgid) == _caught(shell_pid) and _cmdline(tpgid) == _cmdline(shell_pid)
    return starting(False, state, fork)


def _caught(pid: int) -> str | None:
    """The process's caught-signals mask (``SigCgt`` of ``/proc/PID/status``)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"SigCgt:"):
                    return line[7:].strip().decode("ascii", "replace")
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _descendants(pid: int) -> list[int]:
    """The pids under ``pid``, read from ``/proc/PID/task/*/children``: the cost is the tree's size,
    not the machine's process count (asked every ``pollMs`` while a program computes). Without those
    files (a kernel built without them), psutil's scan of every process."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # ended meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as fh:
                    children = [int(child) for child in fh.read().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def terminal_canonical(tty: str) -> bool | None:
    """Whether the pane's terminal is in canonical (line) mode; ``None`` if it cannot be read."""
    try:
        fd = os.open(tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return bool(termios.tcgetattr(fd)[3] & termios.ICANON)
    except termios.error:
        return None
    finally:
        os.close(fd)


def terminal_input_queued(tty: str) -> int | None:
    """Bytes typed into the pane's terminal that nobody has read yet; ``None`` if unreadable."""
    try:
        fd = os.open(tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        queued: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        return queued
    except OSError:
        return None
    finally:
        os.close(fd)


def at_prompt(shell_pid: int, tty: str) -> bool:
    fg = foreground(shell_pid)
    return fg.shell_in_front and terminal_canonical(tty) is False


def waiting_at_prompt(fg: Foreground, tty: str) -> bool:
    """The shell reads a command line and has nothing typed pending: it sits idle at its prompt."""
    return fg.shell_in_front and terminal_canonical(tty) is False and terminal_input_queued(tty) == 0


def tree_names(shell_pid: int) -> list[str]:
    """Names of every descendant of the shell (the pane's process tree, shell excluded)."""
    try:
        children = psutil.Process(shell_pid).children(recursive=True)
    except psutil.Error:
        return []
    names: list[str] = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            names.append(child.name())
    return names


def group_names(shell_pid: int, pgid: int) -> list[str]:
    """Names of the shell's descendants in process group ``pgid``, oldest first."""
    names: list[str] = []
    try:
        procs = psutil.Process(shell_pid).children(recursive=True)
    except psutil.Error:
        return names
    for proc in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == pgid:
                names.append(proc.name())
    return names


def group_cpu_seconds(shell_pid: int, pgid: int) -> float:
    """CPU seconds the shell's descendants in process group ``pgid`` ran *or waited to run*.

    From the scheduler's nanosecond counts of every thread (``/proc/PID/task/*/schedstat``: time
    on a CPU plus time runnable on a run queue): a command the machine starves of CPU still wants
    it, and must not read as idle. ``utime``/``stime`` (psutil's) count ticks of 10 ms and only
    time on a CPU: on a loaded machine a busy loop read 0 % in a 150 ms window and a ``cpu`` wait
    was met while its command still worked. Where the kernel keeps no schedstat, they are the
    fallback."""
    total = 0.0
    try:
        procs = psutil.Process(shell_pid).children(recursive=True)
    except psutil.Error:
        return 0.0
    for proc in procs:
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            demand = _demand_seconds(proc.pid)
            if demand is None:
                times = proc.cpu_times()
                demand = times.user + times.system
            total += demand
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return total


def _demand_seconds(pid: int) -> float | None:
    """Run plus run-queue time of every thread of ``pid`` in seconds; ``None`` without schedstat."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    ns = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as fh:
                run, wait, _slices = fh.read().split()
        except FileNotFoundError:
            if task == str(pid):
                return None  # no schedstat in this kernel (the leader's task is always there)
            continue  # a thread that ended meanwhile
        except (OSError, ValueError):
            continue
        ns += int(run) + int(wait)
    return ns / 1e9
