"""``tether.process.tree``'s helpers for other layers: ``alive``, the one liveness check of a pid
(shells' panes, the sandbox's placeholder ledgers and bubblewrap's leftovers all ask it), and
``end_child``, how a child that exits at the end of its input is ended (the tmux control client,
a remote host's ``sh``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from proc_probe import wait_until
from tether.process import tree
from tether.process.tree import alive, end_child


def test_a_running_process_is_alive_and_a_reaped_one_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not alive(child.pid)


def test_a_process_of_another_user_is_alive() -> None:
    # Asked by an unprivileged process about PID 1 (root's), the kernel refuses the signal (EPERM)
    # instead of not finding the process, and that still means it exists.
    if os.geteuid() != 0:
        assert alive(1)
        return
    read, write = os.pipe()
    pid = os.fork()  # the child only drops its user, asks and reports: nothing else runs in it
    if pid == 0:  # pragma: no cover - reports through the pipe
        answer = b"E"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            answer = b"1" if alive(1) else b"0"
        finally:
            os.write(write, answer)
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"1"


def test_a_child_that_ends_at_eof_is_not_killed() -> None:
    async def run() -> int | None:
        proc = await asyncio.create_subprocess_exec(
            "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
        )
        await end_child(proc, grace_s=10.0)
        return proc.returncode

    assert asyncio.run(run()) == 0


def test_a_child_that_ignores_eof_is_killed_after_the_grace_and_reaped() -> None:
    async def run() -> tuple[int | None, float, int]:
        proc = await asyncio.create_subprocess_exec(
            "sleep", "30", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
        )
        start = time.monotonic()
        await end_child(proc, grace_s=0.3)
        return proc.returncode, time.monotonic() - start, proc.pid

    code, took, pid = asyncio.run(run())
    assert code == -signal.SIGKILL
    assert took >= 0.25  # not at once: it waited for the grace (asyncio may fire a timer a tick early)
    assert not alive(pid)


def test_a_process_with_an_empty_environment_is_read_once_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An empty /proc/PID/environ means either "in the middle of execve" (worth a retry) or "started
    # with an empty environment" (`env -i`): /proc/PID/stat and /proc/PID/syscall tell them apart.
    # Retrying the second kind 50 times per escapee per scan let one command that left a thousand
    # `env -i` processes hold the server's event loop for minutes. (One still running its start-up
    # is read a second time, after a few yields: the asleep one here, once.)
    child = subprocess.Popen(["sleep", "60"], env={})
    try:
        assert wait_until(lambda: (info := tree._stat_fields(child.pid)) is not None and info[0] == "S")
        assert _exec_done(child.pid)
        reads: list[str] = []
        real = tree._read

        def counting(path: str) -> bytes:
            if path.endswith("/environ"):
                reads.append(path)
            return real(path)

        monkeypatch.setattr(tree, "_read", counting)
        assert tree._has_marker(child.pid, b"TETHER_TREE_ID=x\0") is False
        assert reads == [f"/proc/{child.pid}/environ"]
    finally:
        child.kill()
        child.wait()


def test_an_empty_read_of_a_nonempty_environment_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux 6.18 under load: a process finishing its execve read back an empty environ although
    # its stat already gave it a 1,573-byte block; a moment later the block read in full. Taken
    # for an `env -i` process, a backgrounded `sleep` went unseen and outlived its command (CI).
    marker = b"TETHER_TREE_ID=t\0"
    child = subprocess.Popen(["sleep", "60"], env={"TETHER_TREE_ID": "t"})
    try:
        assert wait_until(lambda: tree._stat_fields(child.pid) is not None and _exec_done(child.pid))
        environ = f"/proc/{child.pid}/environ"
        reads: list[str] = []
        real = tree._read

        def empty_once(path: str) -> bytes:
            if path == environ:
                reads.append(path)
                if len(reads) == 1:
                    return b""
            return real(path)

        monkeypatch.setattr(tree, "_read", empty_once)
        assert tree._has_marker(child.pid, marker) is True
        assert len(reads) == 2
    finally:
        child.kill()
        child.wait()


def test_an_exec_that_never_finishes_is_waited_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # An exec stuck in the kernel (its binary on a hung file system) would otherwise cost every
    # scan of its tree the whole wait, on the server's event loop.
    child = subprocess.Popen(["sleep", "60"])
    try:
        reads: list[str] = []
        real = tree._read

        def empty_environ(path: str) -> bytes:
            if path.endswith("/environ"):
                reads.append(path)
                return b""
            return real(path)

        monkeypatch.setattr(tree, "_read", empty_environ)
        monkeypatch.setattr(tree, "_environ_pending", lambda pid: b"42")  # always "mid-exec"
        monkeypatch.setattr(tree, "_exec_stuck", set())
        assert tree.environ_of(child.pid) == b""
        waited = len(reads)
        assert waited > 1  # read again while it was worth waiting
        assert tree.environ_of(child.pid) == b""
        assert len(reads) == waited + 1  # then once per scan
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("syscall", [b"running\n", b"59 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffe 0x7f00\n"])
def test_an_empty_block_inside_execve_is_read_again(monkeypatch: pytest.MonkeyPatch, syscall: bytes) -> None:
    # While execve lays the new environment out, the kernel has set env_start and env_end to one
    # address: the block looks as empty as an `env -i` process's. Seen in a stressed run: the
    # escapee was "running" at that instant, and was taken for an `env -i` one (1 miss in 320).
    child = subprocess.Popen(["sleep", "60"], env={"TETHER_TREE_ID": "t"})
    try:
        assert wait_until(lambda: tree._stat_fields(child.pid) is not None and _exec_done(child.pid))
        real = tree._read
        environ, stat = f"/proc/{child.pid}/environ", f"/proc/{child.pid}/stat"
        reads: list[str] = []

        def mid_exec(path: str) -> bytes:
            if path == environ:
                reads.append(path)
                return b"" if len(reads) == 1 else real(path)
            if path == stat:  # env_start == env_end, as the layout loop starts
                fields = real(path).split(b" ")
                fields[-2] = fields[-3]  # env_end = env_start (fields 51 and 50)
                return b" ".join(fields)
            if path == f"/proc/{child.pid}/syscall":
                return syscall
            return real(path)

        monkeypatch.setattr(tree, "_read", mid_exec)
        assert tree._has_marker(child.pid, b"TETHER_TREE_ID=t\0") is True
    finally:
        child.kill()
        child.wait()


def _exec_done(pid: int) -> bool:
    # argv of the new image is set up: `sleep` has replaced the forked Python.
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().startswith(b"sleep\0")
