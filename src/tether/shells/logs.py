"""Full pane output in ``$TETHER_HOME/logs/<shell>.log``, and inotify wake-ups when it grows.

Invariant: a byte offset in a log names the same byte forever. tmux appends every byte a pane
prints through ``pipe-pane 'exec cat >> LOG'``; the log is never truncated or rotated. The size cap
(``[sessions] log_max_bytes``) is kept by punching a hole over the oldest bytes
(``fallocate(PUNCH_HOLE | KEEP_SIZE)``): disk use stays under the cap, the file's length and every
offset stay valid, and ``SEEK_DATA`` tells where retained output starts. Any tether process that
sees a log grow enforces the cap; output printed while no tether process runs is trimmed by the
next one that sees the shell print. On a filesystem without hole punching the log is not trimmed
(logged once).

Waits are event-driven: one inotify descriptor per process watches the logs directory and sets
the wake-up events of the shells whose log was written. The same wake-ups time the output
(``timing.OutputClock``: the samples recordings are built from).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import functools
import logging
import os
import struct
from pathlib import Path

from tether.shells.timing import OutputClock

logger = logging.getLogger(__name__)

_IN_MODIFY = 0x00000002
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_BLOCK = 4096

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
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


class LogWatcher:
    """inotify on the logs directory; ``waker(shell_id)`` events are set when a log is written."""

    def __init__(self, logs_dir: Path, *, cap: int) -> None:
        self.logs_dir = logs_dir
        self.cap = cap
        self._fd = -1
        self._wakers: dict[str, set[asyncio.Event]] = {}
        self._starts: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.clock = OutputClock(logs_dir)

    def start(self) -> None:
        if self._fd >= 0:
            return
        self.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        wd = _libc.inotify_add_watch(fd, os.fsencode(self.logs_dir), _IN_MODIFY | _IN_CREATE)
        if wd < 0:
            os.close(fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch failed for {self.logs_dir}")
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)
        self.clock.start(self._loop)

    def close(self) -> None:
        self.clock.close()
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def waker(self, shell_id: str) -> asyncio.Event:
        """A new event set on every write to the shell's log; release it with ``drop``."""
        event = asyncio.Event()
        self._wakers.setdefault(shell_id, set()).add(event)
        return event

    def drop(self, shell_id: str, event: asyncio.Event) -> None:
        group = self._wakers.get(shell_id)
        if group is not None:
            group.discard(event)
            if not group:
                del self._wakers[shell_id]

    def wake_all(self) -> None:
        """Set every waiter's event (a remote host's connection dropped: each waiter looks why)."""
        for group in self._wakers.values():
            for event in group:
                event.set()

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        names: set[str] = set()
        pos = 0
        while pos + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            if mask & _IN_Q_OVERFLOW:
                # Events were dropped: wake every waiter; each re-reads its log from its offset.
                names.update(self._wakers)
            raw = data[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0")
            pos += _EVENT.size + length
            if raw.endswith(b".log") and raw.startswith(b"dsh-"):
                names.add(raw[:-4].decode("utf-8", "replace"))
        for name in names:
            for event in self._wakers.get(name, ()):
                event.set()
            # One stat per batch of writes (microseconds), shared by the cap and the clock.
            path = log_path(self.logs_dir, name)
            size = log_size(path)
            self._check_cap(name, path, size)
            self.clock.note(name, size)

    def _check_cap(self, shell_id: str, path: Path, size: int) -> None:
        # The start of retained data is cached and re-read only after a punch, so the cap holds to
        # within one batch of writes.
        start = self._starts.get(shell_id)
        if start is None:
            start = self._starts[shell_id] = data_start(path)
        if size - start > self.cap and enforce_cap(path, self.cap):
            self._starts[shell_id] = data_start(path)
