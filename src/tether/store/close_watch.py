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
import errno
import logging
import os
from pathlib import Path
from typing import ClassVar

from tether import inotify

logger = logging.getLogger(__name__)


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
        # A failed read counts as lost events: everyone is woken and re-checks the lock itself.
        closed, lost = inotify.changed(self._fd, inotify.IN_CLOSE_WRITE)
        names = {raw.decode("utf-8", "surrogateescape") for raw in closed}
        for name, events in self._waiters.items():
            if lost or name in names:
                for event in events:
                    event.set()


def _open_watch(directory: Path) -> int | None:
    try:
        return inotify.open_watch(directory, inotify.IN_CLOSE_WRITE | inotify.IN_ONLYDIR)
    except OSError as exc:
        if exc.errno in inotify.EXHAUSTED or exc.errno == errno.ENOSYS:
            # No inotify instance or watch left (ENOSPC: max_user_watches reached).
            logger.warning("inotify unavailable (%s); lock waits fall back to back-off", exc.strerror)
            return None
        raise
