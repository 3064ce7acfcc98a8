"""What runs in a remote pane, from one question to the host: its processes and its terminal mode.

Invariant: one script answers everything a wait or ``shell_state`` asks about a pane — the
processes under the pane's shell (``/proc`` on Linux, else ``ps -t`` on the pane's terminal) and
``stty -a`` of its terminal — and the decisions are the local host's (``hosts.procinfo``): the
shell is in front when the terminal's foreground group is its own; a command's CPU is that of its
process group among the shell's descendants; readline reads a line when the terminal is not
canonical. What no POSIX tool reports (bytes typed but not yet read) is not known here, so a
remote shell is never called *waiting* only because its queue is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tether.shells.hosts.procinfo import front_busy, starting
from tether.shells.tmux.commands import sh_quote

_PS_TIME_RE = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def facts_script(shell_pid: int, tty: str, *, terminal: bool) -> str:
    """Print ``S <stat line>`` (or ``P <ps line>``) per process of the pane, then, with
    ``terminal``, ``T`` and the lines of ``stty -a`` of its terminal. On Linux the walk follows
    ``/proc/PID/task/*/children`` down from the shell (its cost is the tree's size, not the
    machine's process count, and it forks nothing); without those files every process of the
    shell's session is looked at; without ``/proc``, ``ps -t`` on the terminal. It never exits
    or changes directory, so it may run in the channel's own shell."""
    t = sh_quote(tty)
    stty = f"; echo T; stty -a < {t}" if terminal else ""
    return (
        f"if [ -r /proc/{shell_pid}/task/{shell_pid}/children ]; then todo={shell_pid}; "
        'while [ -n "$todo" ]; do set -- $todo; todo=; for p; do '
        '{ read -r l < /proc/$p/stat; } 2>/dev/null || continue; echo "S $l"; '
        'for c in /proc/$p/task/*/children; do k=; { read -r k < "$c"; } 2>/dev/null; todo="$todo $k"; '
        "done; done; done; "
        "elif [ -r /proc/self/stat ]; then "
        'for d in /proc/[0-9]*/stat; do { read -r l < "$d"; } 2>/dev/null || continue; '
        f'r=${{l##*) }}; set -- $r; [ "$4" = {shell_pid} ] && echo "S $l"; done; '
        f"else ps -t {sh_quote(tty.removeprefix('/dev/'))} -o pid= -o ppid= -o pgid= -o tpgid= -o time= "
        f'-o stat= -o comm= | sed "s/^/P /"; fi{stty}'
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    tpgid: int
    cpu: float  # user + system seconds
    state: str  # R, S, D, Z, T … (the first letter of ``ps -o stat``)
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PaneProcs:
    procs: tuple[Proc, ...]
    canonical: bool | None  # None: the terminal's mode could not be read

    def _by_pid(self) -> dict[int, Proc]:
        return {p.pid: p for p in self.procs}

    def foreground(self, shell_pid: int) -> tuple[int, bool, str]:
        """(foreground pgid or 0, the shell is in front, the foreground leader's name)."""
        procs = self._by_pid()
        shell = procs.get(shell_pid)
        if shell is None or shell.tpgid <= 0:
            return 0, False, ""
        in_front = shell.tpgid == shell.pgid
        if in_front:
            return shell.tpgid, True, shell.name
        leader = procs.get(shell.tpgid) or next((p for p in self.procs if p.pgid == shell.tpgid), None)
        return shell.tpgid, False, leader.name if leader is not None else ""

    def front_busy(self, shell_pid: int) -> bool:
        """``procinfo.front_busy`` for the shell ``shell_pid`` (not busy when it is not listed)."""
        shell = self._by_pid().get(shell_pid)
        if shell is None:
            return False
        if shell.tpgid <= 0 or shell.tpgid == shell.pgid:
            return front_busy(shell.state, True, [])
        members = [p.state for p in self.descendants(shell_pid) if p.pgid == shell.tpgid]
        return front_busy(shell.state, False, members)

    def starting(self, shell_pid: int) -> bool:
        """``procinfo.starting`` for the shell ``shell_pid``: whether it works in front itself (a
        fork in front not yet turned into the command is not told apart here)."""
        shell = self._by_pid().get(shell_pid)
        if shell is None or shell.tpgid <= 0:
            return False
        return starting(shell.tpgid == shell.pgid, shell.state, None)

    def descendants(self, shell_pid: int) -> list[Proc]:
        children: dict[int, list[Proc]] = {}
        for p in self.procs:
            children.setdefault(p.ppid, []).append(p)
        out: list[Proc] = []
        todo = [shell_pid]
        while todo:
            for child in children.get(todo.pop(), []):
                if child.pid != shell_pid:
                    out.append(child)
                    todo.append(child.pid)
        return out

    def tree_names(self, shell_pid: int) -> list[str]:
        return [p.name for p in self.descendants(shell_pid)]

    def group_names(self, shell_pid: int, pgid: int) -> list[str]:
        """The shell's descendants in ``pgid``, oldest first (a pipeline's first command first)."""
        return [p.name for p in sorted(self.descendants(shell_pid), key=lambda p: p.pid) if p.pgid == pgid]

    def group_cpu(self, shell_pid: int, pgid: int) -> float:
        return sum(p.cpu for p in self.descendants(shell_pid) if p.pgid == pgid)


def parse_facts(out: str, clock_ticks: int) -> PaneProcs:
    procs: list[Proc] = []
    canonical: bool | None = None
    lines = out.splitlines()
    if "T" in lines:  # what follows is stty -a of the terminal
        at = lines.index("T")
        words = " ".join(lines[at + 1 :]).split()
        canonical = False if "-icanon" in words else True if "icanon" in words else None
        lines = lines[:at]
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "S":
            proc = _from_stat(rest, clock_ticks)
        elif kind == "P":
            proc = _from_ps(rest)
        else:
            continue
        if proc is not None:
            procs.append(proc)
    return PaneProcs(procs=tuple(procs), canonical=canonical)


def _from_stat(line: str, clock_ticks: int) -> Proc | None:
    # "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime"
    open_, close = line.find("("), line.rfind(")")
    fields = line[close + 2 :].split()
    if open_ < 0 or close < open_ or len(fields) < 13:
        return None
    try:
        return Proc(
            pid=int(line[:open_]),
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            tpgid=int(fields[5]),
            cpu=(int(fields[11]) + int(fields[12])) / clock_ticks,
            state=fields[0][:1],
            name=line[open_ + 1 : close],
        )
    except ValueError:
        return None


def _from_ps(line: str) -> Proc | None:
    fields = line.split(None, 6)
    if len(fields) < 7:
        return None
    m = _PS_TIME_RE.fullmatch(fields[4])
    try:
        cpu = 0.0
        if m is not None:
            days, hours, minutes, seconds = m.groups()
            cpu = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
        return Proc(
            pid=int(fields[0]),
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            tpgid=int(fields[3]),
            cpu=cpu,
            state=fields[5][:1],
            name=fields[6].strip().rsplit("/", 1)[-1][:15],
        )
    except ValueError:
        return None
