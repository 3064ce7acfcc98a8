"""PID 1 of a tether process's command container: mounts /proc, reaps, and dies with its server.

Invariant: this process lives exactly as long as the tether process that started it. It exits the
moment its death pipe reports end-of-file — the kernel closes the write end, held only by tether,
however tether ends (SIGKILL included) — and it is SIGKILLed by ``PR_SET_PDEATHSIG`` when the
thread that started it ends. When PID 1 of a PID namespace exits, the kernel SIGKILLs every other
process in that namespace; nothing inside can leave the namespace, whatever its cgroup, session
or environment.

Run as a script by ``tether.process.container`` (``python -I -S container_init.py DEATH READY``),
after ``unshare(CLONE_NEWPID)``, so that it is PID 1 of a new namespace. It imports only the
standard library, so it starts without the virtual environment and never imports tether; and of
it only what it needs: ``_signal``, the built-in module ``signal`` wraps, because ``signal`` (its
enums, and ``enum`` with ``functools`` and ``collections``, which ``-S`` has not loaded) was about
a third of this process's start — a start that ``tether exec`` may wait for before it spawns.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys

# The built-in module ``signal`` wraps (see above); it has no stubs of its own.
signal = __import__("_signal")

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_REC, _MS_SLAVE = 1 << 14, 1 << 19
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _check(libc: ctypes.CDLL, result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _private_proc(libc: ctypes.CDLL) -> None:
    """A mount namespace of our own whose /proc shows this PID namespace.

    Mounts stay slaves of the parent's (a later mount outside still appears inside); only the new
    /proc is ours, so commands see their own PIDs in ``ps``, ``pgrep`` and ``/proc/$$``.
    """
    _check(libc, libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc, libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None), "make / a slave mount")
    _check(
        libc,
        libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None),
        "mount proc on /proc",
    )


def _reap_all() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    death, ready = int(argv[1]), int(argv[2])
    # Terminal signals reach a namespace's init only when it has a handler; Python installs one
    # for SIGINT, so ignore it (and the others a terminal or session leader sends) explicitly.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NAME, b"tether-init", 0, 0, 0)  # what `ps` shows as PID 1
    try:
        _check(libc, libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        _private_proc(libc)
    except OSError as exc:
        os.write(ready, f"error {exc.errno} {exc.strerror}".encode())
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    os.write(ready, b"ok")
    os.close(ready)
    while True:
        try:
            readable, _, _ = select.select([death, wake_r], [], [])
        except InterruptedError:
            readable = [wake_r]
        if death in readable:
            # EOF (or data, which tether never sends): the server is gone. Exiting makes the
            # kernel kill everything left in the namespace.
            return 0
        while True:
            try:
                if not os.read(wake_r, 4096):
                    break
            except BlockingIOError:
                break
        _reap_all()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
