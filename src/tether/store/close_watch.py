"""Wake-ups when a file in one directory is closed after being opened for writing (inotify).

Invariant: one inotify descriptor per (event loop, directory) while anyone waits, watching for
``IN_CLOSE_WRITE``; every registered waiter whose file name appears in an event — or every waiter,
when the kernel's queue overflowed — has its ``asyncio.Event`` set. The descriptor is closed and
its reader removed when the last waiter leaves, so nothing stays open between waits.

The kernel reports ``IN_CLOSE_WRITE`` when the last reference to an open file description that was
opened for writing goes away — an explicit ``close()`` *and* the implicit close when its process
dies (even by SIGKILL). ``store.locks`` relies on exactly this to learn that a lock holder let go.

When inotify is unavailable (no instances left: ``EMFILE``/``ENFILE``/``ENOSPC``), ``register``
returns ``None`` and the caller falls back to retrying with a bounded back-off.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from pathlib import Path
from typing import ClassVar

logger = logging.getLogger(__name__)

_IN_CLOSE_WRITE = 0x00000008
_IN_Q_OVERFLOW = 0x00004000
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


class CloseWatch:
    """The watcher of one directory in one event loop; use ``register``/``unregister``."""

    _instances: ClassVar[dict[tuple[asyncio.AbstractEventLoop, str], CloseWatch]] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop, directory: Path, fd: int) -> None:
        self._loop = loop
        self._key = (loop, str(directory))
        self._fd = fd
        self._waiters: dict[str, set[asyncio.Event]] = {}
        loop.add_reader(fd, self._on_readable)

    @classmethod
    def register(cls, directory: Path, name: str) -> asyncio.Event | None:
        """An event set whenever ``directory/name`` is closed after writing (``None``: no inotify)."""
        loop = asyncio.get_running_loop()
        watch = cls._instances.get((loop, str(directory)))
        if watch is None:
            fd = _open_watch(directory)
            if fd is None:
                return None
            watch = cls(loop, directory, fd)
            cls._instances[watch._key] = watch
        event = asyncio.Event()
        watch._waiters.setdefault(name, set()).add(event)
        return event

    @classmethod
    def unregister(cls, directory: Path, name: str, event: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        watch = cls._instances.get((loop, str(directory)))
        if watch is None:
            return
        events = watch._waiters.get(name)
        if events is not None:
            events.discard(event)
            if not events:
                del watch._waiters[name]
        if not watch._waiters:
            watch._close()

    def _close(self) -> None:
        self._instances.pop(self._key, None)
        self._loop.remove_reader(self._fd)
        os.close(self._fd)

    def _on_readable(self) -> None:
        names: set[str] = set()
        overflow = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                overflow = True  # be safe: wake everyone, they re-check the lock themselves
                break
            if not data:
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    overflow = True
                elif mask & _IN_CLOSE_WRITE:
                    names.add(raw.rstrip(b"\0").decode("utf-8", "surrogateescape"))
        for name, events in self._waiters.items():
            if overflow or name in names:
                for event in events:
                    event.set()


def _open_watch(directory: Path) -> int | None:
    fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        if err in (errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOSYS):
            logger.warning("inotify unavailable (%s); lock waits fall back to back-off", os.strerror(err))
            return None
        raise OSError(err, f"inotify_init1: {os.strerror(err)}")
    wd = _libc.inotify_add_watch(fd, os.fsencode(directory), _IN_CLOSE_WRITE | _IN_ONLYDIR)
    if wd < 0:
        err = ctypes.get_errno()
        os.close(fd)
        if err == errno.ENOSPC:  # max_user_watches reached
            logger.warning("inotify watches exhausted; lock waits fall back to back-off")
            return None
        raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
    return int(fd)
