"""The command container: one PID + mount namespace per tether process, killed with it.

Invariant: while a tether process can create namespaces (root, or CAP_SYS_ADMIN), every command
it spawns for a call (not the ones asked to ``keep_background``) is born inside its container and
cannot leave it: when the tether process ends — exit, crash, ``SIGKILL`` — the container's PID 1
(``container_init``) sees its death pipe close and exits, and the kernel then kills every process
in the namespace. Moving to another cgroup, ``setsid``, double forks and an emptied environment
change nothing: a process cannot change its PID namespace. Inside, ``/proc`` is remounted for the
namespace, so ``ps``, ``pgrep``/``pkill``, ``$$`` and ``/proc/$$`` agree with each other (and a
command sees only this server's commands, not the host's processes).

How a spawn gets in without paying for it: PID 1 is started once, from a thread that lives as long
as the process (``PR_SET_PDEATHSIG`` follows the parent thread). Each spawn then switches only the
spawning thread into the container — ``setns`` into its mount namespace (after ``unshare(CLONE_FS)``,
which the kernel requires of a thread that shares its filesystem context with others) and into its
PID namespace for children — runs ``Popen`` (still on CPython's ``vfork`` fast path), and switches
back, restoring the thread's working directory. That is four system calls around the spawn instead
of an extra program per command. Side effect: the spawning thread keeps a filesystem context
(working directory, umask) of its own from then on; tether never changes either after start-up.

Orphans of commands are re-parented to PID 1 of the container (a subreaper does not take children
across a PID namespace boundary), which reaps them; ``orphans()`` lists them for the tree tracker.
Without the privilege, or where the kernel refuses, ``container()`` is None and commands run as
before (tracked by cgroup and marker, see ``tree``) — they then do not die with a SIGKILLed server.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)

_CLONE_FS = 0x00000200
_CLONE_NEWNS = 0x00020000
_CLONE_NEWPID = 0x20000000
_INIT_SCRIPT = Path(__file__).with_name("container_init.py")
_START_TIMEOUT_S = 10.0
_libc = ctypes.CDLL(None, use_errno=True)


def read_proc(path: str) -> bytes:
    """A whole ``/proc`` file. Plain ``os`` calls: ``open()``'s buffered file object costs ~10 µs
    more a read, and spawning reads several of these files every time."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class ContainerError(OSError):
    """The kernel refused a namespace operation (kept as OSError: callers degrade, never crash)."""


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ContainerError(err, f"{what}: {os.strerror(err)}")


def _open_ns(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


class Container:
    """A running container: its PID 1 and the namespace descriptors spawns switch into."""

    def __init__(
        self, *, init: subprocess.Popen[bytes], death_w: int, host_pid_ns: int, host_mnt_ns: int
    ) -> None:
        self.init = init
        self.init_pid = init.pid
        self._death_w = death_w  # our end of the death pipe: PID 1 exits when it closes
        self._host_pid_ns = host_pid_ns
        self._host_mnt_ns = host_mnt_ns
        self._pid_ns = _open_ns(f"/proc/{init.pid}/ns/pid")
        self._mnt_ns = _open_ns(f"/proc/{init.pid}/ns/mnt")
        self._pidfd = os.pidfd_open(init.pid)
        self.owner = os.getpid()

    def alive(self) -> bool:
        """PID 1 still runs (its pidfd turns readable when it exits); one poll, no wait."""
        readable, _, _ = select.select([self._pidfd], [], [], 0)
        return not readable

    def enter(self) -> int:
        """Switch this thread so that the children it forks are born in the container.

        Returns the descriptor of the thread's working directory, for ``leave``. On failure the
        thread is back where it was and ``ContainerError`` is raised.
        """
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # Threads share one filesystem context; setns(CLONE_NEWNS) wants a private one.
            _call(_libc.unshare(_CLONE_FS), "unshare(CLONE_FS)")
            _call(_libc.setns(self._mnt_ns, _CLONE_NEWNS), "setns(container mount namespace)")
        except BaseException:
            os.close(here)
            raise
        try:
            _call(_libc.setns(self._pid_ns, _CLONE_NEWPID), "setns(container PID namespace)")
        except BaseException:
            self._back_to_own_mounts(here)
            raise
        return here

    def leave(self, here: int) -> None:
        """Undo ``enter``: this thread forks in its own namespaces again, in its old directory."""
        try:
            _call(_libc.setns(self._host_pid_ns, _CLONE_NEWPID), "setns(own PID namespace)")
        finally:
            self._back_to_own_mounts(here)

    def _back_to_own_mounts(self, here: int) -> None:
        try:
            # setns(CLONE_NEWNS) moved our root and working directory to the namespace's "/".
            _call(_libc.setns(self._host_mnt_ns, _CLONE_NEWNS), "setns(own mount namespace)")
            os.fchdir(here)
        finally:
            os.close(here)

    def orphans(self) -> list[int]:
        """Processes re-parented to PID 1 (their parent died): candidates for a tree's escapees."""
        pid1 = self.init_pid
        try:
            return [int(pid) for pid in read_proc(f"/proc/{pid1}/task/{pid1}/children").split()]
        except OSError:
            return []

    def close(self) -> None:
        """End PID 1 (and so every process inside); idempotent."""
        if self._death_w < 0:
            return
        os.close(self._death_w)
        self._death_w = -1
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.init.wait(timeout=_START_TIMEOUT_S)
        for fd in (self._pid_ns, self._mnt_ns, self._pidfd):
            os.close(fd)


def _start_in_thread(result: list[Container | BaseException], started: threading.Event) -> None:
    """Body of the container's parent thread: start PID 1, then stay alive as long as the process.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked PID 1 ends, so that thread must not
    be an event loop's or a request's: this one parks forever (a daemon thread ends with us).
    """
    try:
        result.append(_start())
    except BaseException as exc:  # reported to the waiting spawner, which degrades
        result.append(exc)
    started.set()
    threading.Event().wait()


def _start() -> Container:
    host_pid_ns = _open_ns("/proc/thread-self/ns/pid")
    host_mnt_ns = _open_ns("/proc/thread-self/ns/mnt")
    death_r, death_w = os.pipe2(os.O_CLOEXEC)
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    try:
        # Only this thread's *children* go to the new namespace; the next one forked is its PID 1.
        _call(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        try:
            init = subprocess.Popen(
                # argv[0] is the interpreter's own path: Python finds its standard library from it
                # (a bare name it cannot find on PATH sends it looking from the working directory:
                # from `/`, Debian's /lib/python3.X). PID 1 names itself `tether-init` for `ps`.
                [sys.executable, "-I", "-S", str(_INIT_SCRIPT), str(death_r), str(ready_w)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(death_r, ready_w),
                start_new_session=True,  # no terminal: Ctrl-C in `tether exec` must not reach it
            )
        finally:
            _call(_libc.setns(host_pid_ns, _CLONE_NEWPID), "setns(own PID namespace)")
        os.close(ready_w)
        ready_w = -1
        answer = os.read(ready_r, 256)
    except BaseException:
        for fd in (death_w, host_pid_ns, host_mnt_ns):
            os.close(fd)
        raise
    finally:
        for fd in (death_r, ready_r, ready_w):
            if fd >= 0:
                os.close(fd)
    if answer != b"ok":
        init.wait()
        for fd in (death_w, host_pid_ns, host_mnt_ns):
            os.close(fd)
        raise ContainerError(0, f"container PID 1 failed: {answer.decode(errors='replace') or 'no answer'}")
    return Container(init=init, death_w=death_w, host_pid_ns=host_pid_ns, host_mnt_ns=host_mnt_ns)


# What a start meets when a limit is reached for now, not when this machine cannot contain commands.
_FOR_NOW = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_lock = threading.Lock()
_current: Container | None = None
_unavailable: str | None = None
_starting: _Start | None = None


class _Start(NamedTuple):
    """PID 1 being started by its thread (``owner``: the process that began it).

    Not a dataclass: ``tether exec`` calls ``prepare`` before it imports the executor, so that PID 1
    starts on the other core meanwhile, and ``dataclasses`` (with the ``inspect``, ``ast`` and
    ``dis`` it imports) would be ~6 ms more before that."""

    owner: int
    result: list[Container | BaseException]
    done: threading.Event


def _begin() -> _Start:
    start = _Start(owner=os.getpid(), result=[], done=threading.Event())
    threading.Thread(
        target=_start_in_thread, args=(start.result, start.done), name="tether-container", daemon=True
    ).start()
    return start


def prepare() -> None:
    """Begin starting this process's container, without waiting for it.

    A server calls this as it starts (``tether mcp`` while the SDK loads), so its first command
    does not wait the 30-60 ms a PID 1 (a Python process) takes to start, with the event loop
    blocked; ``container()`` then waits only for what is left of that start."""
    global _starting
    with _lock:
        if _unavailable is not None or (_current is not None and _current.owner == os.getpid()):
            return
        if _starting is None or _starting.owner != os.getpid():
            _starting = _begin()


def container() -> Container | None:
    """This process's container, started on first use (and again if its PID 1 was killed).
    Raises ``ContainerError`` (an ``OSError``) when a limit reached for now keeps it from starting."""
    global _current, _unavailable, _starting
    current = _current
    if current is not None and current.owner == os.getpid() and current.alive():
        return current
    if _unavailable is not None:
        return None
    with _lock:
        if _current is not None and _current.owner == os.getpid() and _current.alive():
            return _current
        if _current is not None and _current.owner == os.getpid():
            logger.warning("command container PID 1 (%d) ended; starting a new one", _current.init_pid)
            _current.close()
        _current = None
        # A start that ``prepare`` began in this process is waited for; one inherited through a
        # fork has no thread here.
        try:
            start = _starting if _starting is not None and _starting.owner == os.getpid() else _begin()
        except RuntimeError as exc:  # "can't start new thread": the process limit, for now
            raise ContainerError(errno.EAGAIN, os.strerror(errno.EAGAIN)) from exc
        _starting = None
        start.done.wait(_START_TIMEOUT_S)
        late = ContainerError(0, "container PID 1 did not start in time")
        outcome = start.result[0] if start.result else late
        if isinstance(outcome, Container):
            _current = outcome
            return outcome
        if isinstance(outcome, OSError) and outcome.errno in _FOR_NOW:
            # A limit reached for now (no process or descriptor left): this command cannot start
            # either, and the next one tries again, rather than every later command running
            # without a container for the rest of this process's life.
            raise outcome
        _unavailable = str(outcome)
        logger.warning("commands run without a container (they do not die with a killed server): %s", outcome)
        return None


def unavailable_reason() -> str | None:
    """Why this process has no container, once ``container()`` has tried (None: it has one)."""
    return _unavailable
