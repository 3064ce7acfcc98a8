"""Independent observers of the process table for tests: who is alive, zombies, open fds.

They read ``/proc`` directly (not through tether's own tree tracking), so a test that uses them
checks the tracker instead of trusting it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pty
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import psutil

from hang import HANG_S


def unique_sleep_arg() -> str:
    """A ``sleep`` argument no other process on the machine has: ``1000.<random digits>``."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


@contextlib.contextmanager
def in_terminal(argv: list[str]) -> Iterator[int]:
    """``argv`` as the session leader of a new terminal (its controlling tty); yields its pid, and
    kills it and its children afterwards."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    try:
        yield pid
    finally:
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _state(pid: str) -> str | None:
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def alive_with(token: str) -> list[int]:
    """Live (non-zombie) processes with ``token`` as one whole argument (e.g. ``sleep TOKEN``).

    A whole argument, so the shell running ``sleep TOKEN &`` or a CLI given that text does not
    count: only the process that received the token as its own argument does.
    """
    found = []
    needle = b"\0" + token.encode() + b"\0"
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = _read(f"/proc/{pid}/cmdline")
        except OSError:
            continue
        if needle in b"\0" + cmdline and _state(pid) not in (None, "Z"):
            found.append(int(pid))
    return found


def ticks_now() -> int:
    """Clock ticks since boot, the unit of a process's start time in ``/proc/PID/stat``."""
    return int(float(_read("/proc/uptime").split()[0]) * os.sysconf("SC_CLK_TCK"))


def _started(pid: int) -> int | None:
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2 :].split()[19])


def zombie_children(*, born_since: int | None = None) -> set[int]:
    """Zombies among this process's children; with ``born_since`` (``ticks_now()`` taken before the
    code under test ran), only those started since: a process an earlier test left to this one (a
    subreaper's orphan) that happens to end meanwhile is not the code's."""
    me = os.getpid()
    kids: set[int] = set()
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            kids.update(int(c) for c in _read(f"/proc/{me}/task/{task}/children").split())
        except OSError:
            continue
    zombies = {pid for pid in kids if _state(str(pid)) == "Z"}
    if born_since is None:
        return zombies
    return {pid for pid in zombies if (started := _started(pid)) is None or started >= born_since}


def open_fd_set() -> set[tuple[int, str]]:
    """This process's open descriptors as (number, target) pairs, after a garbage collection.

    Comparing sets rather than counts keeps a leak check honest inside a long suite: descriptors
    that earlier tests left for the garbage collector may close during the check (the count
    drops), but a leaked descriptor always shows up as a new pair.
    """
    gc.collect()
    found: set[tuple[int, str]] = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            found.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:  # closed between listdir and readlink (the listdir fd itself)
            continue
    return found


def wait_until(predicate: Callable[[], bool], timeout: float = HANG_S) -> bool:
    """Poll a condition (for facts with no event to wait on, e.g. a kernel state); the deadline
    is only a hang guard (``hang.HANG_S``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def kill_all(pids: list[int]) -> None:
    """SIGKILL, then reap the ones that are our children (orphans we adopted as subreaper)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


_FREEZER = "/sys/fs/cgroup/freezer"


@contextlib.contextmanager
def freezer() -> Iterator[Callable[[int], None]]:
    """A cgroup v1 freezer group of the test's own; yields ``freeze(pid)``, which moves ``pid``
    into it and returns once the kernel says FROZEN: a process that not even SIGKILL ends until it
    is thawed (it shows in state ``D``, as one in uninterruptible sleep on a hung network file
    system does). Afterwards its processes are thawed, killed and the group removed. Skips the
    test where no v1 freezer is mounted writable (cgroup v2's freeze lets SIGKILL through)."""
    import pytest

    group = f"{_FREEZER}/tether-test-{uuid.uuid4().hex[:12]}"
    try:
        os.mkdir(group)
    except OSError as exc:
        pytest.skip(f"no writable cgroup v1 freezer at {_FREEZER}: {exc}")

    def write(name: str, text: str) -> None:
        with open(f"{group}/{name}", "w") as handle:
            handle.write(text)

    def freeze(pid: int) -> None:
        write("cgroup.procs", str(pid))
        write("freezer.state", "FROZEN")
        assert wait_until(lambda: _read(f"{group}/freezer.state").strip() == b"FROZEN")

    try:
        yield freeze
    finally:
        write("freezer.state", "THAWED")
        left = lambda: [int(p) for p in _read(f"{group}/cgroup.procs").split()]  # noqa: E731
        kill_all(left())
        wait_until(lambda: not left())
        os.rmdir(group)


def mcp_children(*, besides: set[int] | frozenset[int] = frozenset()) -> list[psutil.Process]:
    """This process's children that run ``mcp`` (a ``tether mcp`` a client started), but for the
    pids in ``besides``. A child that ended meanwhile is passed over: another test's process may
    be a zombie of this worker for a moment, and asking it its command line raises."""
    found = []
    for child in psutil.Process().children():
        if child.pid in besides:
            continue
        try:
            if "mcp" in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found
