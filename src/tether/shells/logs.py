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

A log is only ever opened as a regular file, without blocking and without following a link:
something else in its place (a directory, a symbolic link, a FIFO, whose open would wait for a
writer for ever) is a ``StorageError`` naming it, and
``check_live`` says when a live shell's log is gone, the one place tether reads its output from.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from pathlib import Path

from tether.errors import StorageError
from tether.home import open_regular

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_BLOCK = 4096

_libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter already runs on
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


@functools.lru_cache(maxsize=4096)
def log_path(logs_dir: Path, shell_id: str) -> Path:
    # Kept: asked several times per output event and per call, and pathlib builds slowly.
    return logs_dir / f"{shell_id}.log"


def _not_a_file(path: Path) -> StorageError:
    return StorageError(
        f"{path}, a shell's output log, is not a regular file (a directory, a FIFO, a device or a "
        "symbolic link was put in its place); tether reads the shell's output only from it: "
        "remove it, then close the shell (shell_manage close) and open another, which starts a "
        "log of its own"
    )


def _open(path: Path, flags: int) -> int | None:
    """The log opened (``None``: there is none); never blocks, and only a regular file is opened."""
    try:
        return open_regular(path, flags | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENXIO, errno.EISDIR, errno.ELOOP):
            raise _not_a_file(path) from exc
        raise


def log_size(path: Path) -> int:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(info.st_mode):
        raise _not_a_file(path)
    return info.st_size


def check_live(path: Path, shell_id: str) -> None:
    """Refuse to follow a live shell whose log is gone or replaced: its offsets would name nothing,
    and every wait would end in a misleading timeout ("did not reach its prompt")."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise StorageError(
            f"the output log of shell {shell_id}, {path}, was removed while the shell ran; tether "
            "reads the shell's output only from it, so it cannot follow this shell any more: close "
            f"it (shell_manage close) and open another (shell_open from={shell_id} starts in its "
            "directory)"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_a_file(path)


def data_start(path: Path) -> int:
    """The first retained offset (0 unless the cap punched the head of the log)."""
    fd = _open(path, os.O_RDONLY)
    if fd is None:
        return 0
    try:
        return os.lseek(fd, 0, os.SEEK_DATA)
    except OSError:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_range(path: Path, start: int, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a log (clipped to what exists; punched bytes are dropped)."""
    return read_from(path, start, end)[1]


def read_from(path: Path, start: int, end: int | None = None) -> tuple[int, bytes]:
    """``read_range``, and the offset its bytes begin at: past ``start`` when the log's head was
    punched there (``data_start``)."""
    fd = _open(path, os.O_RDONLY)
    if fd is None:
        return start, b""
    try:
        size = os.fstat(fd).st_size
        end = size if end is None else min(end, size)
        if start >= end:
            return start, b""
        try:
            first = os.lseek(fd, 0, os.SEEK_DATA)
        except OSError:
            first = size
        start = max(start, first)
        return start, (_pread_all(fd, start, end - start) if start < end else b"")
    finally:
        os.close(fd)


def read_at(path: Path, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of a log from ``offset`` as they are (``b""``: none, or no log)."""
    fd = _open(path, os.O_RDONLY)
    if fd is None:
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
    fd = _open(path, os.O_WRONLY)
    if fd is None:
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
                # Here, not at the top: the render workers import this module, and ``logging``
                # would be a mebibyte and a quarter of each one's memory.
                import logging

                logging.getLogger(__name__).warning("log cap cannot be enforced on this filesystem: %s", path)
            return False
        return True
    finally:
        os.close(fd)
