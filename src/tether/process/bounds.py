"""Bounds on what one confined command may take: its processes and its memory, by cgroup.

Invariant: a bounded command is *born* inside its group — never moved in after it ran — so no
fork it makes escapes the bound, and the group goes when the command has ended (a tether that
crashed leaves groups that the next tether process removes: ``sweep_stale``, the one sweep of
every hierarchy tether writes in). Where no controller is writable, nothing is bounded and
``support().reason`` says why; callers report that, never claim a bound.

Controllers: cgroup v1's ``pids`` (``pids.max``) and ``memory`` (``memory.limit_in_bytes``, and
``memory.memsw.limit_in_bytes`` where swap is accounted, so swap is no way round it), each in
tether's own cgroup of its hierarchy. On these machines cgroup v2 (``/sys/fs/cgroup/unified``)
has no controller: the kernel gives each controller to one hierarchy only, and v1 has them.

How a command is born inside without paying for a move. Moving a *process* between cgroups takes
the kernel's global threadgroup lock for writing, which waits for an RCU grace period when no
move happened just before: 8-24 ms on these machines, more than the command. A thread that moves
*itself* through v1's ``tasks`` file skips that lock (``cgroup_procs_write_start``: "we migrate a
single thread … we can skip the global lock"): 20-50 µs. So ``Group.born_inside`` moves the
spawning thread in, the caller forks, and the thread moves back; a child is born in its forking
thread's cgroups. The thread's own memory stays charged where it was (a cgroup v1 memory charge
follows the process's owner, not the thread).

Not bounded: CPU. Moving a thread into a fresh ``cpu`` group took 0.3-10 ms here (the scheduler
sets the group up on first use), and CPU is a share, not a stock: a command that spins slows
the machine, it does not take it down, and its timeout ends it.

Persistent shells do the same from their launcher (``tether.shell.sandbox.launch``): it is
started by the tmux server, so it creates and joins the group itself (``shell_plan`` gives it
the directories and the values), right before it executes bubblewrap.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)
# The controllers tether bounds, in the order their groups are created and joined.
CONTROLLERS = ("pids", "memory")
_ROUNDS = 64  # SIGKILL rounds when a group without cgroup.kill is emptied
_counter = itertools.count(1)
_lock = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """What one command may take: ``processes`` tasks at once and ``memory_mb`` MiB of memory
    (``0``: that one is not bounded)."""

    processes: int
    memory_mb: int

    def limits(self, controller: str, directory: Path) -> list[tuple[str, str]]:
        """(file, value) pairs that set this bound in ``directory`` of ``controller``'s hierarchy."""
        if controller == "pids" and self.processes > 0:
            return [("pids.max", str(self.processes))]
        if controller == "memory" and self.memory_mb > 0:
            value = str(self.memory_mb << 20)
            pairs = [("memory.limit_in_bytes", value)]
            if (directory / "memory.memsw.limit_in_bytes").exists():
                pairs.append(("memory.memsw.limit_in_bytes", value))  # after: memsw ≥ limit
            return pairs
        return []

    def text(self, controllers: tuple[str, ...]) -> str:
        """``at most 512 processes and 2048 MiB of memory`` — what ``controllers`` enforce."""
        parts = []
        if "pids" in controllers and self.processes > 0:
            parts.append(f"{self.processes} processes")
        if "memory" in controllers and self.memory_mb > 0:
            parts.append(f"{self.memory_mb} MiB of memory")
        return "at most " + " and ".join(parts) if parts else ""


@dataclass(frozen=True, slots=True)
class Support:
    """What this machine lets tether bound: ``dirs`` maps a controller to tether's own cgroup in its
    hierarchy (writable); ``reason`` says why one is missing."""

    dirs: dict[str, Path]
    reason: str | None

    def describe(self, bounds: Bounds) -> str:
        """The bound as a sentence for a report: what applies, and what does not and why."""
        wanted = tuple(
            c
            for c in CONTROLLERS
            if (c == "pids" and bounds.processes) or (c == "memory" and bounds.memory_mb)
        )
        applied = tuple(c for c in wanted if c in self.dirs)
        text = bounds.text(applied)
        missing = [_WHAT[c] for c in wanted if c not in self.dirs]
        if missing:
            unbounded = f"{' and '.join(missing)} not bounded ({self.reason or 'no writable cgroup'})"
            text = f"{text}; {unbounded}" if text else unbounded
        return text or "processes and memory not bounded (turned off in [sandbox])"


_WHAT = {"pids": "processes", "memory": "memory"}


def _own_v1_dirs() -> tuple[dict[str, Path], str | None]:
    """Tether's own cgroup in each mounted, writable v1 hierarchy of ``CONTROLLERS``."""
    try:
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, rel = line.split(":", 2)
            for name in names.split(","):
                own[name] = rel
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except (OSError, ValueError):
        return {}, "/proc/self/cgroup cannot be read"
    found: dict[str, Path] = {}
    seen: set[str] = set()
    for line in mounts:
        parts = line.split()
        if len(parts) < 4 or parts[2] != "cgroup":
            continue
        options = parts[3].split(",")
        for controller in CONTROLLERS:
            if controller in options and controller in own and controller not in found:
                seen.add(controller)
                candidate = Path(parts[1]) / own[controller].lstrip("/")
                if os.access(candidate, os.W_OK) and (candidate / "tasks").exists():
                    found[controller] = candidate
    missing = [c for c in CONTROLLERS if c not in found]
    if not missing:
        return found, None
    if any(c in seen for c in missing):
        return found, f"the {', '.join(missing)} cgroup of this process is not writable (not root?)"
    return found, (
        f"no cgroup v1 hierarchy with the {', '.join(missing)} controller is mounted; tether bounds "
        "commands through cgroup v1 only"
    )


_support: Support | None = None


def support() -> Support:
    """Probed once per process; the first probe also removes what crashed tethers left."""
    global _support
    if _support is None:
        with _lock:
            if _support is None:
                dirs, reason = _own_v1_dirs()
                for directory in dirs.values():
                    sweep_stale(directory)
                _support = Support(dirs=dirs, reason=reason)
    return _support


def _write(path: Path | str, text: str) -> None:
    # One write(2): cgroup files take a value per write, and open()'s buffering costs more.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _members(directory: Path) -> list[int]:
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def empty(directory: Path) -> None:
    """SIGKILL everything in the group at ``directory`` (``cgroup.kill`` where the kernel has it;
    else every member, in rounds: a member killed may have forked just before)."""
    kill = directory / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            _write(kill, "1")
        return
    me = os.getpid()
    for _ in range(_ROUNDS):
        # Never this process: a thread of ours that could not move back out would list it here.
        members = [pid for pid in _members(directory) if pid != me]
        if not members:
            return
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os.sched_yield()


def sweep_stale(base: Path) -> None:
    """In ``base`` (tether's own cgroup of one hierarchy): kill and remove the groups of tether
    processes that are gone (``tether-<pid>``, with their leaves), and remove the groups of
    persistent shells that no process holds any more (``tether-shell-*``; one still in use refuses
    the ``rmdir``)."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            name = entry.name
            if name.startswith("tether-shell-") and entry.is_dir():
                with contextlib.suppress(OSError):
                    entry.rmdir()
                continue
            if not name.startswith("tether-") or not name[7:].isdigit():
                continue
            if int(name[7:]) == os.getpid() or Path(f"/proc/{name[7:]}").exists():
                continue
            for leaf in entry.iterdir():
                if leaf.is_dir():
                    empty(leaf)
                    with contextlib.suppress(OSError):
                        leaf.rmdir()
            with contextlib.suppress(OSError):
                entry.rmdir()


def remove_quietly(root: Path) -> None:
    """Remove ``root`` and its empty leaves (what is still in use stays, for the next sweep)."""
    with contextlib.suppress(OSError):
        for leaf in root.iterdir():
            if leaf.is_dir():
                with contextlib.suppress(OSError):
                    leaf.rmdir()
        root.rmdir()


_roots: dict[str, Path] = {}


def _root(controller: str, base: Path) -> Path:
    """``<base>/tether-<pid>``: the parent of this process's command groups in one hierarchy."""
    root = _roots.get(controller)
    if root is None or not root.is_dir():
        root = base / f"tether-{os.getpid()}"
        root.mkdir(exist_ok=True)
        if controller not in _roots:
            atexit.register(remove_quietly, root)
        _roots[controller] = root
    return root


@dataclass(frozen=True, slots=True, kw_only=True)
class Reached:
    """What the kernel refused or ended at a group's bounds (counts since it was made)."""

    forks_refused: int = 0
    oom_kills: int = 0


def read_reached(dirs: dict[str, Path]) -> Reached:
    """``pids.events`` (``max N``: forks refused at ``pids.max``) and ``memory.oom_control``
    (``oom_kill N``: processes the group's out-of-memory killer ended)."""
    values = {}
    for controller, file, key in (
        ("pids", "pids.events", "max"),
        ("memory", "memory.oom_control", "oom_kill"),
    ):
        directory = dirs.get(controller)
        if directory is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            for line in (directory / file).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    values[controller] = int(value)
    return Reached(forks_refused=values.get("pids", 0), oom_kills=values.get("memory", 0))


def reached_lines(reached: Reached, bounds: Bounds, *, since: Reached | None = None) -> list[tuple[str, str]]:
    """``(what, sentence)`` per bound the command met — ``processes`` or ``memory`` — (``since``:
    counts already reported)."""
    forks = reached.forks_refused - (since.forks_refused if since else 0)
    kills = reached.oom_kills - (since.oom_kills if since else 0)
    lines: list[tuple[str, str]] = []
    if forks > 0:
        sentence = (
            f"the bound of {bounds.processes} processes was reached: {forks} fork(s) refused "
            "(EAGAIN, 'Resource temporarily unavailable'); [sandbox].max_processes sets it"
        )
        lines.append(("processes", sentence))
    if kills > 0:
        sentence = (
            f"the bound of {bounds.memory_mb} MiB of memory was reached: the kernel killed {kills} "
            "process(es) of the command (SIGKILL); [sandbox].memory_mb sets it"
        )
        lines.append(("memory", sentence))
    return lines


class Group:
    """One command's group in every hierarchy tether bounds (``dirs``: controller → directory)."""

    def __init__(self, dirs: dict[str, Path], bounds: Bounds) -> None:
        self.dirs = dirs
        self.bounds = bounds
        self._removed = False

    @classmethod
    def create(cls, bounds: Bounds) -> Group | None:
        """A fresh group under this process's ``tether-<pid>``, its limits set; ``None`` where
        nothing can be bounded. ``OSError`` when a hierarchy refuses (the caller refuses too: a
        bound that was promised is never dropped silently)."""
        found = support()
        dirs: dict[str, Path] = {}
        name = f"b{next(_counter)}"
        try:
            for controller, base in found.dirs.items():
                pairs = bounds.limits(controller, base)
                if not pairs:
                    continue
                directory = _root(controller, base) / name
                directory.mkdir()
                dirs[controller] = directory
                for file, value in pairs:
                    _write(directory / file, value)
        except OSError:
            Group(dirs, bounds).remove()
            raise
        return cls(dirs, bounds) if dirs else None

    @contextlib.contextmanager
    def born_inside(self) -> Iterator[None]:
        """Within this block, processes the calling thread forks are born in the group: the thread
        itself moves in (v1 ``tasks``), and back out at the end."""
        if not self.dirs:
            yield
            return
        own = support().dirs
        entered: list[str] = []
        try:
            for controller, directory in self.dirs.items():
                _write(directory / "tasks", "0")
                entered.append(controller)
            yield
        finally:
            for controller in entered:
                try:
                    _write(own[controller] / "tasks", "0")
                except OSError as exc:
                    # Raising here would lose the child just forked. The thread stays in the group
                    # until the next bounded spawn moves it; the group outlives its command then
                    # (its rmdir is refused), and goes with this process.
                    logger.warning(
                        "bounds: the spawning thread could not leave %s: %s", self.dirs[controller], exc
                    )

    def reached(self) -> Reached:
        return read_reached(self.dirs)

    def remove(self) -> None:
        """Empty the group (what is left is killed) and remove it; idempotent."""
        if self._removed:
            return
        self._removed = True
        for directory in self.dirs.values():
            empty(directory)
            with contextlib.suppress(OSError):
                directory.rmdir()


def shell_plan(key: str, bounds: Bounds) -> dict[str, object]:
    """What a persistent shell's launcher needs to create and join its group: for each hierarchy
    ``[directory, [[file, value], ...]]``, and the bound's sentence. The group is named by the
    shell (``tether-shell-<key>``), not by a tether process: the shell outlives the one that
    opened it."""
    found = support()
    groups = []
    for controller, base in found.dirs.items():
        pairs = bounds.limits(controller, base)
        if pairs:
            groups.append([str(base / f"tether-shell-{key}"), [list(p) for p in pairs]])
    return {"groups": groups, "text": found.describe(bounds)}


def remove_shell_groups(plan: object) -> None:
    """Remove a persistent shell's groups (``shell_plan``'s ``groups``) once it has ended; one still
    holding a process is emptied first."""
    if not isinstance(plan, dict):
        return
    for entry in plan.get("groups", ()):
        if isinstance(entry, list) and entry and isinstance(entry[0], str):
            directory = Path(entry[0])
            # Only a shell's own group is ever emptied, whatever a damaged spec names.
            if directory.name.startswith("tether-shell-") and directory.is_dir():
                empty(directory)
                with contextlib.suppress(OSError):
                    directory.rmdir()


def shell_reached(plan: object) -> Reached:
    """The counts of a persistent shell's groups (zero where they are gone)."""
    dirs: dict[str, Path] = {}
    if isinstance(plan, dict):
        for entry in plan.get("groups", ()):
            if isinstance(entry, list) and entry and isinstance(entry[0], str):
                path = Path(entry[0])
                for controller in CONTROLLERS:
                    if any(str(p[0]).startswith(f"{controller}.") for p in entry[1]):
                        dirs[controller] = path
    return read_reached(dirs)
