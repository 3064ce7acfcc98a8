"""Receiving the tracer's output: a FIFO read on the event loop, filtered as it arrives.

Invariant: memory and disk stay bounded whatever the command does. strace writes one line per
failed syscall, and a build can fail millions of file lookups (``ENOENT``), so the tracer writes
into a FIFO rather than a file, and only lines whose errno can be a sandbox denial are kept — at
most ``MAX_LINES`` of them.

Why the reader also holds a write end: a FIFO with no writer reads as end-of-file, which an
event-loop reader would see before the tracer even opened it. With our own writer open the FIFO
never ends; ``finish()`` instead drains it once the process settled. By then the tracer is gone
— the PID namespace's init exits only after every process in it did — so whatever it wrote is
already in the pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Final

from tether.shell.sandbox.collect import RELEVANT

MAX_LINES: Final = 4096
MAX_LINE_CHARS: Final = 4096
_READ_SIZE: Final = 1 << 16


class TraceReader:
    """The read side of one run's trace FIFO; ``finish()`` returns the kept lines."""

    def __init__(self, fifo: str) -> None:
        os.mkfifo(fifo, 0o600)
        self._fd: int | None = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._keepalive: int | None = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._partial = b""
        self._lines: list[bytes] = []
        self._result: str | None = None
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._drain)

    def _drain(self, max_chunks: int = 16) -> None:
        # Bounded per callback so a chatty tracer cannot monopolise the event loop (the reader is
        # level-triggered: the loop calls again while data is left).
        for _ in range(max_chunks):
            if self._fd is None:
                return
            try:
                chunk = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            if not chunk:
                return
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            if len(self._partial) > MAX_LINE_CHARS:
                self._partial = self._partial[:MAX_LINE_CHARS]
            for line in complete:
                if len(self._lines) < MAX_LINES and RELEVANT.search(line):
                    self._lines.append(line[:MAX_LINE_CHARS])

    def finish(self) -> str:
        """Everything kept, after one last drain (call once the process settled; memoized)."""
        if self._result is None:
            self._drain(max_chunks=1 << 30)
            if self._partial and RELEVANT.search(self._partial) and len(self._lines) < MAX_LINES:
                self._lines.append(self._partial)
            self.close()
            self._result = b"\n".join(self._lines).decode("utf-8", "replace")
            self._lines, self._partial = [], b""
        return self._result

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._keepalive is not None:
            os.close(self._keepalive)
            self._keepalive = None
