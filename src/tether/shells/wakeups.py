"""inotify wake-ups when a shell's log grows, and what each batch of writes triggers.

Invariant: waits are event-driven. One inotify descriptor per process watches the logs directory
and sets the wake-up events of the shells whose log was written; a dropped batch (queue overflow)
wakes every waiter, each re-reading its log from its own offset. The same wake-ups keep the size
cap (``logs.enforce_cap``) and time the output (``timing.OutputClock``: the samples recordings are
built from).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tether import inotify
from tether.errors import StorageError
from tether.shells.logs import data_start, enforce_cap, log_path, log_size
from tether.shells.timing import OutputClock
from tether.shells.tmux.control import SessionError

_WRITES = inotify.IN_MODIFY | inotify.IN_CREATE


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
        try:
            fd = self._fd = inotify.open_watch(self.logs_dir, _WRITES)
        except OSError as exc:
            if exc.errno not in inotify.EXHAUSTED:
                raise
            raise SessionError(
                f"persistent shells need an inotify watch on {self.logs_dir}, and none is left "
                f"({os.strerror(exc.errno)}): {inotify.limits_hint()}; then call again"
            ) from exc
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)
        self.clock.start(self._loop)

    def forget(self, shell_id: str) -> None:
        """The shell was closed: nothing of it is kept (a wait still on it keeps its waker)."""
        self._starts.pop(shell_id, None)
        self.clock.forget(shell_id)

    def held(self) -> set[str]:
        return {*self._starts, *self.clock.held()}

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
        written, lost = inotify.changed(self._fd, _WRITES)
        names = {
            raw[:-4].decode("utf-8", "replace")
            for raw in written
            if raw.endswith(b".log") and raw.startswith(b"dsh-")
        }
        if lost:
            # Events were dropped: wake every waiter; each re-reads its log from its offset.
            names.update(self._wakers)
        for name in names:
            for event in self._wakers.get(name, ()):
                event.set()
            # One stat per batch of writes (microseconds), shared by the cap and the clock.
            path = log_path(self.logs_dir, name)
            try:
                size = log_size(path)
                self._check_cap(name, path, size)
            except StorageError:
                continue  # something else in the log's place: each call on the shell says so
            self.clock.note(name, size)

    def _check_cap(self, shell_id: str, path: Path, size: int) -> None:
        # The start of retained data is cached and re-read only after a punch, so the cap holds to
        # within one batch of writes.
        start = self._starts.get(shell_id)
        if start is None:
            start = self._starts[shell_id] = data_start(path)
        if size - start > self.cap and enforce_cap(path, self.cap):
            self._starts[shell_id] = data_start(path)
