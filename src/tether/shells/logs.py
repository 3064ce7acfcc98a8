"""Full pane output in ``$TETHER_HOME/logs/<shell>.log``: where it is, reading it, its size cap.

Invariant: a byte offset in a log names the same byte forever. tmux appends every byte a pane
prints through ``pipe-pane 'exec cat >> LOG'``; the log is never truncated or rotated. The size cap
(``[sessions] log_max_bytes``) is kept by punching a hole over the oldest bytes
(``fallocate(PUNCH_HOLE | KEEP_SIZE)``): disk use stays under the cap, the file's length and every
offset stay valid, and ``SEEK_DATA`` tells where retained output starts. Any tether process that
sees a log grow enforces the cap; output printed while no tether process runs is trimmed by the
next one that sees the shell print. On a filesystem without hole punching the log is not trimmed
(logged once).

Nothing here needs the event loop: the render worker reads logs with these functions and imports
no more (``tether.shells.worker``). The wake-ups when a log grows are ``wakeups``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_BLOCK = 4096

_libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter already runs on
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


@functools.lru_cache(maxsize=4096)
def log_path(logs_dir: Path, shell_id: str) -> Path:
    # Kept: asked several times per output event and per call, and pathlib builds slowly.
    return logs_dir / f"{shell_id}.log"


def log_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def data_start(path: Path) -> int:
    """The first retained offset (0 unless the cap punched the head of the log)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        return os.lseek(fd, 0, os.SEEK_DATA)
    except OSError:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_range(path: Path, start: int, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a log (clipped to what exists; punched bytes are dropped)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        end = size if end is None else min(end, size)
        if start >= end:
            return b""
        try:
            first = os.lseek(fd, 0, os.SEEK_DATA)
        except OSError:
            first = size
        start = max(start, first)
        return _pread_all(fd, start, end - start) if start < end else b""
    finally:
        os.close(fd)


def read_at(path: Path, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of a log from ``offset`` as they are (``b""``: none, or no log)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        # Clipped to what exists: a buffer of ``limit`` bytes would be allocated whatever is read.
        return _pread_all(fd, offset, min(limit, os.fstat(fd).st_size - offset))
    finally:
        os.close(fd)


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def enforce_cap(path: Path, cap: int) -> bool:
    """Punch the oldest bytes so at most ``cap`` bytes remain (keeping ~cap/2 after a trim)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        try:
            first = os.lseek(fd, 0, os.SEEK_DATA)
        except OSError:
            return False
        if size - first <= cap:
            return False
        # Trim to half the cap so a busy shell is not trimmed on every write; whole blocks only.
        cut = ((size - cap // 2) // _BLOCK) * _BLOCK
        if cut <= first:
            return False
        if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, cut) != 0:
            err = ctypes.get_errno()
            if err in (errno.EOPNOTSUPP, errno.ENOSYS):
                logger.warning("log cap cannot be enforced on this filesystem: %s", path)
            return False
        return True
    finally:
        os.close(fd)
