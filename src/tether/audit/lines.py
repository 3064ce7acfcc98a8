"""Reading a day file from its end: the complete-line boundary and lines in reverse order.

Invariant: only *complete* lines (ending in ``\\n``) are ever yielded. Bytes after the last
newline are a record whose writer has not finished (or died mid-``write()``); they belong to
nobody until the appender, holding the lock, completes or discards them.

Everything reads with ``os.pread`` in fixed blocks from the end, so finding the newest records of
a day file costs one block however large the file is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

BLOCK = 64 * 1024


def complete_end(fd: int, size: int) -> int:
    """Offset just past the last ``\\n`` in the first ``size`` bytes of ``fd`` (0 if none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - BLOCK)
        chunk = os.pread(fd, pos - start, start)
        idx = chunk.rfind(b"\n")
        if idx >= 0:
            return start + idx + 1
        pos = start
    return 0


def iter_lines_reverse(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for the complete lines before ``end``, newest first.

    ``end`` must be a line boundary (0 or just past a ``\\n``); lines are yielded without their
    newline, an empty line as ``b""``.
    """
    if end <= 0:
        return
    pos = end - 1  # drop the final newline: [pos, limit) is data not yet yielded
    buf = b""
    while True:
        idx = buf.rfind(b"\n")
        while idx >= 0:
            yield pos + idx + 1, buf[idx + 1 :]
            buf = buf[:idx]
            idx = buf.rfind(b"\n")
        if pos == 0:
            yield 0, buf
            return
        start = max(0, pos - BLOCK)
        buf = os.pread(fd, pos - start, start) + buf
        pos = start
