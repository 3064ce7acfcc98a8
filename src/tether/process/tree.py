"""Finding, signalling and reaping every process a spawned command created.

Invariant: a process tree is "everything the command started", not only its process group —
``setsid`` and double-forked daemons leave the group but are still found, by the best mechanism
this machine offers, chosen once per tether process:

* **cgroup v2** (preferred): a tree still running shortly after spawn gets a leaf cgroup
  ``<our cgroup>/tether-<pid>/t<n>``; its current members are moved in, every later descendant
  is born inside (even one that clears its environment), and ``cgroup.kill`` ends them all. A tether process
  that crashed leaves ``tether-<deadpid>``; the next one kills and removes it.
* **always**: the ppid chain from the root, the process group, and the tree's marker environment
  variable ``TETHER_TREE_ID`` (inherited through fork, ``setsid`` and double forks), looked for
  among our own children (orphans come to us, the subreaper) or, without a subreaper, in ``/proc``.

The marker is always set, because no move from the parent can beat a fast command:
``bash -c 'setsid x &'`` can fork and exit before any pid is written into ``cgroup.procs``.

Trees born in the command container (``tether.process.container``) have one more fact: their
orphans go to the container's PID 1, not to us, and are found among its children by the marker.
Escapees that shed both the marker and the cgroup (``env -i setsid x &`` before the move) cannot be
told apart by tree; they are ended when the last tree of the container ends (nothing in the
container outlives every call), and the kernel ends them when the server ends, however it ends.

Either way tether is made a child subreaper (``PR_SET_CHILD_SUBREAPER``): escapees whose parent
dies are re-parented to us instead of to PID 1 (which on these machines never reaps), so we can
reap their zombies. We only ever ``waitpid`` a pid we can prove belongs to one of our trees (its
cgroup is under ours, or we saw it in a scan), never a child some other code is waiting for.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tether.process.bounds import remove_quietly, sweep_stale
from tether.process.bounds import support as bounds_support
from tether.process.container import Container
from tether.process.container import read_proc as _read

_PR_SET_CHILD_SUBREAPER = 36
TREE_MARKER = "TETHER_TREE_ID"

_subreaper_done = False
_PF_KTHREAD = 0x00200000  # in the flags of /proc/PID/stat: a kernel thread
# execve and execveat, as /proc/PID/syscall numbers them here (other machines: no such check).
_EXECVE = {"x86_64": (b"59", b"322"), "aarch64": (b"221", b"281")}.get(os.uname().machine, ())
_EXEC_WAIT_S = 0.1  # the longest an exec in flight is waited for, once per process
_exec_stuck: set[tuple[int, bytes]] = set()  # (pid, start time) of execs waited out in vain
_adoption_lock = threading.Lock()
_paused = 0  # pause_adoption() callers not yet resumed
_pauses_begun = 0  # how many pauses ever began (a tree alive across one looks in /proc too)
_detached: list[ProcessTree] = []  # trees released with keep_running, reaped as their members end
# Unsettled trees by root pid: their roots are our own children, never another tree's escapee.
_live: dict[int, ProcessTree] = {}


def kill_live_trees() -> None:
    """SIGKILL every tree not yet settled: the end of this process is near (an interpreter exit,
    a server told to stop with no time left), and nothing a command started may outlive it."""
    for tree in list(_live.values()):
        tree.signal_all(signal.SIGKILL)


atexit.register(kill_live_trees)
_counter = itertools.count(1)


def _set_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux ≥ 3.4); idempotent. During a
    ``pause_adoption`` the flag is only set once the pause ends."""
    global _subreaper_done
    if _subreaper_done:
        return True
    with _adoption_lock:
        if not _subreaper_done:
            _subreaper_done = _set_subreaper(_paused == 0)
    return _subreaper_done


def pause_adoption(*, as_before: bool = False) -> Callable[[], None]:
    """Stop taking orphans until the returned function is called (idempotent; pauses nest).

    For a daemon started meanwhile that outlives us — the tmux server, which daemonizes away
    from the client we spawn — so that it goes to PID 1, not to us: as our child, every process
    its shells orphan would end as a zombie of ours that nothing reaps. Meanwhile our own
    trees' orphans go to PID 1 too (those born in the command container go to its PID 1 anyway);
    a tree alive during a pause therefore also looks for escapees in ``/proc``.

    ``as_before``: for a program that embeds tether (``tether.Tether``), whose process is not
    tether's: once this pause ends, the process takes orphans only if it did before the pause
    began, not because a command ran meanwhile. A subreaper's orphans are its own to reap, and
    the program's own children's (``sh -c 'x &'``) would end as zombies nothing reaps.
    """
    global _paused, _pauses_begun
    with _adoption_lock:
        adopting_before = _subreaper_done
        _paused += 1
        _pauses_begun += 1
        if _paused == 1 and _subreaper_done:
            _set_subreaper(False)
    resumed = False

    def resume() -> None:
        global _paused, _subreaper_done
        nonlocal resumed
        with _adoption_lock:
            if resumed:
                return
            resumed = True
            _paused -= 1
            if as_before and not adopting_before:
                _subreaper_done = False  # the flag is off: a pause was on since it was first asked for
            if _paused == 0 and _subreaper_done:
                _set_subreaper(True)

    return resume


def _own_cgroup2_dir() -> Path | None:
    """The directory of our own cgroup in the v2 hierarchy, if mounted and writable."""
    try:
        rel = next(
            line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except (OSError, StopIteration):
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            candidate = Path(parts[1]) / rel.lstrip("/")
            if os.access(candidate, os.W_OK) and (candidate / "cgroup.procs").exists():
                return candidate
    return None


class CgroupRoot:
    """``<our cgroup>/tether-<pid>``: the parent of every tree cgroup this process creates."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def probe(cls) -> CgroupRoot | None:
        base = _own_cgroup2_dir()
        if base is None:
            return None
        sweep_stale(base)
        root = base / f"tether-{os.getpid()}"
        try:
            root.mkdir(exist_ok=True)
            probe = root / "probe"
            probe.mkdir(exist_ok=True)
            ok = (probe / "cgroup.kill").exists()
            probe.rmdir()
        except OSError:
            return None
        if not ok:
            return None
        atexit.register(remove_quietly, root)
        return cls(root)

    def new_leaf(self) -> Path | None:
        leaf = self.path / f"t{next(_counter)}"
        try:
            leaf.mkdir()
        except OSError:
            return None
        return leaf

    def owns(self, pid: int) -> bool:
        """The pid lives (or died, as a zombie) in one of our tree cgroups."""
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return False
        marker = f"/{self.path.name}/"
        return any(line.startswith("0::") and marker in line + "/" for line in text.splitlines())


_cgroup_root: CgroupRoot | None = None
_cgroup_probed = False


def cgroup_root() -> CgroupRoot | None:
    global _cgroup_root, _cgroup_probed
    if not _cgroup_probed:
        _cgroup_probed = True
        _cgroup_root = CgroupRoot.probe()
        bounds_support()  # its first probe sweeps what crashed tethers left in the v1 hierarchies
    return _cgroup_root


def alive(pid: int) -> bool:
    """Whether a process with this pid exists. One of another user counts: the kernel refuses it
    signal 0 (``EPERM``) instead of not finding it (``ESRCH``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def end_child(proc: asyncio.subprocess.Process, grace_s: float = 2.0) -> None:
    """End a child that exits at the end of its input (a tmux control client, a remote ``sh``):
    its stdin is closed, it is killed if it has not exited within ``grace_s``, and this returns
    once it is reaped."""
    if proc.stdin is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def descendants(seeds: set[int], *, spare: Callable[[int], bool] | None = None) -> set[int]:
    """``seeds`` and every process below them (ended ones that are still zombies included), but
    for a process below them that ``spare`` says yes to, and everything below that."""
    found: set[int] = set()
    stack = list(seeds)
    while stack:
        pid = stack.pop()
        if pid in found or (spare is not None and pid not in seeds and spare(pid)):
            continue
        found.add(pid)
        stack.extend(_children_of(pid))
    return found


def _children_of(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a child belongs to the thread that forked it)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            found.extend(int(c) for c in _read(f"/proc/{pid}/task/{task}/children").split())
    return found


def _adopted_candidates() -> list[int]:
    """Children of our main thread: the kernel hands orphans to a subreaper's group leader."""
    me = os.getpid()
    try:
        return [int(c) for c in _read(f"/proc/{me}/task/{me}/children").split()]
    except OSError:
        return _children_of(me)


def _stat_fields(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a pid, or None if it is gone."""
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[1]), int(rest[2])


def _of_session(pid: int, leader: int) -> bool:
    """``pid`` is in the process group or the session that ``leader`` created.

    Proof of membership without the marker: a tree's root is spawned as the leader of a new
    session and group, and the kernel keeps that number from any new process while a group or
    session of that id has a member, so one found with it came from the root, however it cleared
    its environment (``env -i x &``, ``env -i nohup x &``)."""
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return False
    rest = raw[raw.rfind(b")") + 2 :].split()
    return leader in (int(rest[2]), int(rest[3]))


def reap_adopted(pid: int) -> bool:
    """Collect ``pid`` if it is already a zombie child of ours — a daemon that double-forked away
    from a child we spawned (the tmux server) was handed to us, the subreaper — and report whether
    it was collected. Never blocks, and never waits for a pid that is not ours or still running
    (its owner may be waiting for it)."""
    if pid <= 0:
        return False
    info = _stat_fields(pid)
    if info is None or info[0] != "Z" or info[1] != os.getpid():
        return False
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def _environ_pending(pid: int) -> bytes | None:
    """Whether an empty read of ``/proc/PID/environ`` is passing rather than final: the process's
    start time (field 22 of ``/proc/PID/stat``, which tells it from a later one with its pid) if
    passing, else ``None``.

    Final: a live process started with an empty environment (``env -i``), whose environment block is
    empty (``env_start == env_end != 0``, fields 50 and 51) and which is not inside ``execve``, a
    zombie (whose environment is gone for good) or a kernel thread (which never has one). Passing:
    an ``execve`` in flight — before the new image has an environment block ``env_end`` is 0, and
    for a while after it has one the block can be unreadable though not empty (seen on Linux 6.18
    under load: an empty read of a 1,573-byte block, which read in full a moment later).
    """
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    # rest[0] is field 3 (state), rest[19] field 22; fields 50 and 51 are rest[47] and rest[48].
    # Older kernels (< 3.5) lack them: retry then.
    if rest[0] in (b"Z", b"X") or int(rest[6]) & _PF_KTHREAD:
        return None
    if len(rest) < 49 or rest[48] == b"0" or int(rest[48]) > int(rest[47]):
        return rest[19]
    # An empty block. Also what an exec shows while it lays the new environment out (the kernel
    # sets env_start and env_end to one address, then moves env_end past each string), so: not
    # final while the process is inside execve — blocked there (a page fault while it copies), or
    # running, which it is for the few microseconds of that loop (a few yields, then final).
    try:
        call = (_read(f"/proc/{pid}/syscall").split() or [b""])[0]
    except OSError:
        return None
    if call in _EXECVE:
        return rest[19]
    if call == b"running":
        for _ in range(3):
            os.sched_yield()
        try:
            if _read(f"/proc/{pid}/environ"):
                return rest[19]
        except OSError:
            return None
    return None


def environ_of(pid: int) -> bytes:
    """The environment block of ``pid`` (``NAME=value\\0`` …); empty if it has none or is gone.

    A process in the middle of execve() shows an empty environ for a moment; wait for it rather
    than miss an escapee caught mid-exec (a backgrounded `sleep` missed so outlived its command
    on a loaded machine). The wait is bounded in time, not in tries: an exec there can take
    milliseconds. Only then: one that runs with an empty environment is answered at once
    (retrying each of a thousand `env -i` escapees held the event loop for minutes). And only
    once per process: one whose exec is stuck (its binary on a hung file system) is not waited
    for again at every scan of its tree, on the event loop.
    """
    deadline: float | None = None
    pause = 0.0
    while True:
        try:
            data = _read(f"/proc/{pid}/environ")
        except OSError:
            return b""
        if data:
            return data
        started = _environ_pending(pid)
        if started is None or (pid, started) in _exec_stuck:
            return b""
        now = time.monotonic()
        if deadline is None:
            deadline = now + _EXEC_WAIT_S
        elif now >= deadline:
            if len(_exec_stuck) >= 4096:
                _exec_stuck.clear()  # bounded: a forgotten one costs one more wait
            _exec_stuck.add((pid, started))
            return b""
        if pause:
            time.sleep(pause)
        else:
            os.sched_yield()
        pause = min(max(pause * 2, 0.0001), 0.002)


def _has_marker(pid: int, marker: bytes) -> bool:
    return marker in environ_of(pid)


class ProcessTree:
    """The set of processes one spawn created, tracked until every one of them is reaped."""

    def __init__(
        self, *, root_pid: int, marker: str | None, cgroup: Path | None, container: Container | None = None
    ) -> None:
        self.root_pid = root_pid
        self.cgroup = cgroup
        self.container = container
        self._marker = f"{TREE_MARKER}={marker}\0".encode() if marker else None
        self._seen: set[int] = set()  # pids observed as members, for reaping without a cgroup
        self._pauses_at_birth = _pauses_begun

    @classmethod
    def adopt(cls, root_pid: int, marker: str | None, container: Container | None = None) -> ProcessTree:
        tree = cls(root_pid=root_pid, marker=marker, cgroup=None, container=container)
        _live[root_pid] = tree
        return tree

    def enter_cgroup(self) -> bool:
        """Move every current member into a fresh leaf cgroup; later forks are born inside it.

        Done only for commands still running a moment after spawn: a cgroup migration costs
        0.1–0.5 ms (the kernel's threadgroup rwsem), which would dominate a ``true``, and a fast
        command's escapees are caught by the marker anyway.
        """
        root = cgroup_root()
        if self.cgroup is not None or root is None:
            return self.cgroup is not None
        members = self.members()
        if not members:
            return False
        leaf = root.new_leaf()
        if leaf is None:
            return False
        procs = leaf / "cgroup.procs"
        for pid in sorted(members):
            with contextlib.suppress(OSError):  # ESRCH: it exited meanwhile
                procs.write_text(str(pid))
        # Anything forked during the moves above is a child of a member: sweep once more.
        for pid in self.members() - members:
            with contextlib.suppress(OSError):
                procs.write_text(str(pid))
        self.cgroup = leaf
        return True

    def members(self) -> set[int]:
        """Live (non-zombie) processes of the tree; the root too while it runs."""
        seeds = {self.root_pid}
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                seeds.update(int(p) for p in (self.cgroup / "cgroup.procs").read_text().split())
        me = os.getpid()
        if self._marker is not None and self.container is not None:
            # Orphans inside the container belong to its PID 1 (no subreaper across namespaces).
            seeds.update(pid for pid in self.container.orphans() if _has_marker(pid, self._marker))
        if self._marker is not None:
            if _subreaper_done:
                # Escapees whose parent died were re-parented to us; the inherited marker says
                # which tree they came from (race-free, unlike the cgroup move after exec), and so
                # does the root's group or session, which an emptied environment keeps.
                seeds.update(
                    pid
                    for pid in _adopted_candidates()
                    if pid not in _live
                    and (_has_marker(pid, self._marker) or _of_session(pid, self.root_pid))
                )
            paused = self.container is None and _pauses_begun != self._pauses_at_birth
            if not _subreaper_done or paused:
                # No subreaper, or one paused while this tree ran: orphans may be PID 1's.
                seeds.update(self._scan_proc(me))
        found = descendants(seeds)
        alive = {pid for pid in found if (info := _stat_fields(pid)) is not None and info[0] != "Z"}
        self._seen |= found
        return alive

    def suspended(self) -> bool:
        """Every live member is stopped by a signal (``SIGSTOP``, ``SIGTSTP``, ``SIGTTIN``): nothing
        in the tree will run again until something continues it, and nothing here will."""
        members = self.members()
        return bool(members) and all(
            (info := _stat_fields(pid)) is not None and info[0] == "T" for pid in members
        )

    def _scan_proc(self, me: int) -> set[int]:
        """Without a subreaper an orphan goes to PID 1: look through every process instead."""
        found: set[int] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            info = _stat_fields(pid)
            if info is not None and (
                info[2] == self.root_pid or (self._marker is not None and _has_marker(pid, self._marker))
            ):
                found.add(pid)
        return found

    def signal_all(self, sig: signal.Signals) -> None:
        if sig == signal.SIGKILL and self.cgroup is not None:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")
        members = self.members()
        with contextlib.suppress(OSError):
            os.killpg(self.root_pid, sig)
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        if sig == signal.SIGTERM:
            # A stopped process (SIGSTOP, Ctrl-Z) only acts on SIGTERM once continued.
            with contextlib.suppress(OSError):
                os.killpg(self.root_pid, signal.SIGCONT)
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)

    def reap(self) -> None:
        """Collect zombies of ours that belonged to this tree, or to a detached one."""
        self._reap_own()
        for tree in list(_detached):
            tree._reap_own()
            if not tree.members():
                tree._reap_own()
                _detached.remove(tree)

    def _reap_own(self) -> None:
        root = cgroup_root()
        for pid in _adopted_candidates():
            if pid == self.root_pid:
                continue
            info = _stat_fields(pid)
            if info is None or info[0] != "Z":
                continue
            # A zombie's environ is gone; its process group and cgroup are not.
            if pid in self._seen or info[2] == self.root_pid or (root is not None and root.owns(pid)):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)

    def release(self, *, keep_running: bool = False) -> None:
        """Forget the cgroup. With ``keep_running`` live members move to our own cgroup first."""
        _live.pop(self.root_pid, None)
        box = self.container
        if box is not None and not any(tree.container is box for tree in _live.values()):
            _sweep_container(box)
        if keep_running:
            # Left running on purpose; when they end later they are zombies of ours to collect.
            _detached.append(self)
        if self.cgroup is None:
            return
        if keep_running:
            with contextlib.suppress(OSError):
                for pid in (self.cgroup / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.cgroup.parent.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()


_SWEEP_ROUNDS = 64


def _sweep_container(box: Container) -> None:
    """SIGKILL everything left in the container once no tree of it runs: escapees nobody owns.

    A process killed with SIGKILL cannot fork any more, but a child it forked just before is not
    in the listing that found its parent: it shows up, re-parented to PID 1, in the next round.
    """
    for _ in range(_SWEEP_ROUNDS):
        found: set[int] = set()
        stack = box.orphans()
        while stack:
            pid = stack.pop()
            if pid not in found:
                found.add(pid)
                stack.extend(_children_of(pid))
        alive = [pid for pid in found if (info := _stat_fields(pid)) is not None and info[0] != "Z"]
        if not alive:
            return
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os.sched_yield()
