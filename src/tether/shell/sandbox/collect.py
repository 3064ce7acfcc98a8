"""The tracer's output of a confined *persistent* shell, cut into one file per command.

Invariant: whatever the shell does, disk and memory stay bounded and every tether process can
read which failed system calls belong to which command. A persistent shell outlives the tether
process that opened it, so nothing in tether reads its tracer: the pane's launcher
(``sandbox.launch``) forks this collector *outside* the sandbox before it execs bubblewrap. The
collector reads the trace FIFO, keeps only lines whose errno can be a denial (``RELEVANT``, at most
``MAX_LINES`` of ``MAX_LINE_CHARS`` per command) and, at each *mark*, writes what it kept since the
previous mark to ``RUNS_DIR/<token>`` and starts over.

Marks are failed ``openat`` calls the shell's own prompt hook makes (``mark_path(nonce)`` +
``TOKEN``, under ``/proc``, where nothing can be created): the hook runs first in
``PROMPT_COMMAND``, when the command line has ended and before the shell prints its end event.
strace prints each failed call before it resumes the caller, and the shell makes the mark only
after its foreground command ended, so every line of that command is already in the FIFO when the
mark arrives — the file of a run is complete the moment it exists. Token 0 (a line a person
typed, an empty line) discards what was kept. A run file ends with the line ``END`` (a reader that
sees no ``END`` waits for the close), and only the newest ``KEEP_RUNS`` files are kept.

This module imports nothing from tether (it runs in the launcher, before bubblewrap).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
from collections import deque
from typing import Final

MAX_LINES: Final = 1024
MAX_LINE_CHARS: Final = 1024
KEEP_RUNS: Final = 64
END: Final = b"END\n"
_READ_SIZE: Final = 1 << 16
MARK_DIR: Final = "/proc/tether-mark-"
# The errnos a denial can carry (see sandbox.denials); everything else is ordinary failure noise.
RELEVANT: Final = re.compile(
    rb"= -1 (?:EROFS|EBUSY|EACCES|EPERM|ESRCH|EINVAL|ENETUNREACH|ECONNREFUSED|EHOSTUNREACH|ETIMEDOUT|"
    rb"EADDRNOTAVAIL|EINPROGRESS) "
)
_MARK: Final = re.compile(rb'"/proc/tether-mark-([0-9a-z]+)/(\d+)"')


def mark_path(nonce: str) -> str:
    """The directory a shell's prompt hook names in its mark (``/proc/tether-mark-NONCE/``)."""
    return f"{MARK_DIR}{nonce}/"


class Collector:
    """Feeds trace bytes; writes one run file per mark carrying ``nonce``."""

    def __init__(self, runs_dir: str, nonce: str) -> None:
        self.runs_dir = runs_dir
        self.nonce = nonce.encode()
        self._partial = b""
        self._lines: list[bytes] = []
        self._dropped = 0
        self._written: deque[str] = deque()

    def feed(self, chunk: bytes) -> None:
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        if len(self._partial) > 1 << 16:  # a line that never ends is not strace's
            self._partial = b""
        for line in complete:
            self._line(line)

    def _line(self, line: bytes) -> None:
        mark = _MARK.search(line)
        if mark is not None and mark.group(1) == self.nonce:
            self._close_run(int(mark.group(2)))
        elif RELEVANT.search(line):
            if len(self._lines) < MAX_LINES:
                self._lines.append(line[:MAX_LINE_CHARS])
            else:
                self._dropped += 1

    def _close_run(self, token: int) -> None:
        lines, dropped = self._lines, self._dropped
        self._lines, self._dropped = [], 0
        if token == 0:
            return
        name = str(token)
        body = b"".join(line + b"\n" for line in lines)
        if dropped:
            body += b"DROPPED %d\n" % dropped
        path = os.path.join(self.runs_dir, name)
        with contextlib.suppress(OSError):
            # One write, then the close a reader waits for (IN_CLOSE_WRITE); END says it is whole.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, body + END)
            finally:
                os.close(fd)
            if name in self._written:
                self._written.remove(name)
            self._written.append(name)
        while len(self._written) > KEEP_RUNS:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.runs_dir, self._written.popleft()))


def collect(fifo: str, runs_dir: str, nonce: str, watched_pid: int) -> None:
    """Read ``fifo`` until its writer (strace) is gone or ``watched_pid`` (the pane's bubblewrap)
    exited, whichever comes first; then drain what is left and return."""
    collector = Collector(runs_dir, nonce)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        pidfd = os.pidfd_open(watched_pid)
    except OSError:  # already gone: its tracer never ran
        os.close(fd)
        return
    poller = select.poll()
    # A FIFO no writer has opened yet polls as nothing at all (Linux reports POLLHUP only once a
    # writer has come and gone), so waiting for strace to open it needs no special case.
    poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            events = dict(poller.poll())
            if fd in events and not _drain(fd, collector):
                return
            if pidfd in events:
                _drain(fd, collector)
                return
    finally:
        os.close(fd)
        os.close(pidfd)


def _drain(fd: int, collector: Collector) -> bool:
    """Read what is there; False once the writer closed (end of file)."""
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        collector.feed(chunk)
