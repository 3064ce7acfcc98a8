"""``tether.process.tree.alive``: the one liveness check of a pid (shells' panes, the sandbox's
placeholder ledgers and bubblewrap's leftovers all ask it)."""

from __future__ import annotations

import os
import subprocess
import sys

from tether.process.tree import alive


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
