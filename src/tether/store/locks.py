"""Per-shell write locks shared by every tether process of one ``TETHER_HOME`` (``safety.lock``).

Invariant: an agent write to a shell with ``lock: require`` happens only while its caller holds
an exclusive ``flock`` on ``$TETHER_HOME/locks/<shell>.lock`` through an open file description of
its own. So writes to one shell are serialised across processes *and* across tasks of one process
(two ``open()`` calls are two descriptions, and ``flock`` makes them exclude each other), and the
lock can never be stuck: the kernel drops it when the holder's descriptor is closed — by
``release``, by cancellation, or by the holder's death (SIGKILL included).

How a waiter waits (no thread, no timeout, cancellable):

1. open the lock file ``O_RDWR`` once and try ``flock(LOCK_EX | LOCK_NB)``; uncontended, done;
2. otherwise register for ``IN_CLOSE_WRITE`` on the locks directory (``close_watch``), then loop:
   clear the event, try again, and sleep on the event. A holder lets go by closing its
   descriptor, which raises ``IN_CLOSE_WRITE`` — also when it dies — so the waiter wakes. The event
   is registered *before* the retry, so a release between a failed try and the wait is not lost.
   A waiter keeps its one descriptor across retries, so waiting never closes a writable descriptor
   and waiters never wake each other in a loop.

Cancelling the waiting task closes its descriptor in a ``finally``, so a cancelled wait never
holds the lock (and a cancellation right after acquiring releases it). There is no separate
timeout (spec: "无单独超时"); the caller's own wait bounds it. ``flock`` is not FIFO: under heavy
contention a waiter may be overtaken. Locks are not re-entrant: a task holding a shell's lock
must not acquire it again. A live shell's lock file is never deleted (deleting a file other
processes may hold open would let two holders lock two different inodes); a closed shell's is
(``discard``): nothing writes to it again (a call naming it is refused before any lock is taken),
so the inode a late holder keeps locks nothing anyone else waits for.

While holding, the lock file holds one JSON line naming the holder (actor, pid, since), which
``holder()`` reports for ``shell_state``; whether the lock is held is decided by the kernel (a
non-blocking probe), never by that text, so a dead holder's leftover line means nothing.

``lock: ignore`` takes no lock and never waits. A *manual* lock (``manual_locks``) refuses every
agent write at once, whichever mode — it is checked before waiting and again after acquiring.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Literal

from tether.store.close_watch import CloseWatch
from tether.store.db import Store
from tether.store.manual_locks import ManualLock, ManualLocks, check_shell_id

LockMode = Literal["require", "ignore"]
LOCKS_DIR = "locks"
_BACKOFF_S = (0.005, 0.01, 0.02, 0.05, 0.1)  # only without inotify


@dataclass(frozen=True, slots=True, kw_only=True)
class LockHolder:
    """Who holds a shell's write lock right now (``actor`` is a conversation id, panel, cli)."""

    actor: str
    pid: int
    since_ms: int


@dataclass(slots=True, kw_only=True)
class WriteLease:
    """A held (or, with ``mode="ignore"``, skipped) write lock. ``release`` is idempotent."""

    shell_id: str
    actor: str
    mode: LockMode
    waited_ms: int = 0
    _fd: int | None = field(default=None, repr=False)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the description releases the flock and wakes waiters


@dataclass(frozen=True, slots=True, kw_only=True)
class LockState:
    """What ``shell_state`` shows about a shell's locks."""

    shell_id: str
    manual: ManualLock | None = None
    holder: LockHolder | None = None

    def locked_for(self, actor: str) -> bool:
        """``locked``: a person locked it, or another conversation's write holds it right now."""
        return self.manual is not None or (self.holder is not None and self.holder.actor != actor)

    def state_for(self, actor: str) -> Literal["locked", "unlocked"]:
        return "locked" if self.locked_for(actor) else "unlocked"


class WriteLocks:
    """The flock-based write locks of one home (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.dir = home / LOCKS_DIR
        self._names: dict[str, str] = {}  # shell id (checked) → its lock file's path, as text

    def path(self, shell_id: str) -> Path:
        return self.dir / f"{check_shell_id(shell_id)}.lock"

    def _name(self, shell_id: str) -> str:
        """``path`` as text, remembered: a run takes its shell's lock on every call, and building
        the path (the id checked, a ``Path`` joined and turned back into text) cost more than the
        ``open`` and ``flock`` together."""
        name = self._names.get(shell_id)
        if name is None:
            if len(self._names) >= 4096:
                self._names.clear()
            name = self._names[shell_id] = os.fspath(self.path(shell_id))
        return name

    async def acquire(
        self, shell_id: str, *, actor: str, before_wait: Callable[[], None] | None = None
    ) -> WriteLease:
        """Wait (without a timeout, cancellably) until this caller holds the shell's lock;
        ``before_wait`` runs once if it is held by someone else (it may raise to give up)."""
        path = self._name(shell_id)
        started = time.monotonic()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # the first lock of this home: its directory comes first
            self._ensure_dir()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if not _try_lock(fd):
                if before_wait is not None:
                    before_wait()
                await self._wait(fd, os.path.basename(path))
            _write_holder(fd, actor)
        except BaseException:
            os.close(fd)
            raise
        waited = int((time.monotonic() - started) * 1000)
        return WriteLease(shell_id=shell_id, actor=actor, mode="require", waited_ms=waited, _fd=fd)

    async def _wait(self, fd: int, name: str) -> None:
        event = CloseWatch.register(self.dir, name)
        if event is None:
            await _wait_backoff(fd)
            return
        try:
            while True:
                event.clear()
                if _try_lock(fd):
                    return
                await event.wait()
        finally:
            CloseWatch.unregister(self.dir, name, event)

    def holder(self, shell_id: str) -> LockHolder | None:
        """Who holds the lock now (``None``: nobody). Probes with a non-blocking ``flock``."""
        try:
            fd = os.open(self.path(shell_id), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            # Opened for writing on purpose: if the probe wins the lock for an instant, its close
            # raises IN_CLOSE_WRITE, so a waiter that lost a try to the probe is woken again.
            if _try_lock(fd):
                return None
            return _read_holder(fd)
        finally:
            os.close(fd)

    def discard(self, shell_id: str) -> None:
        """The shell was closed: its lock file goes (a home that opens shells for months would
        otherwise keep one for each)."""
        self.path(shell_id).unlink(missing_ok=True)

    def _ensure_dir(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)


class ShellLocks:
    """Manual locks plus write locks: what the run/send paths and ``shell_state`` use."""

    def __init__(self, home: Path, store: Store) -> None:
        self.manual = ManualLocks(store)
        self.writes = WriteLocks(home)

    def check_manual(self, shell_id: str, *, actor: str | None = None) -> None:
        """``RefusedError`` at once when a person locked the shell and ``actor`` is an agent."""
        self.manual.check(shell_id, actor=actor)

    async def acquire(self, shell_id: str, *, actor: str, mode: LockMode = "require") -> WriteLease:
        """Refuse at once on a manual lock; with ``require`` wait for the write lock, with
        ``ignore`` return an unheld lease at once. The caller must ``release()`` the lease."""
        if mode not in ("require", "ignore"):
            raise ValueError(f"lock mode {mode!r}")
        check_shell_id(shell_id)
        if mode == "ignore":
            self.manual.check(shell_id, actor=actor)
            return WriteLease(shell_id=shell_id, actor=actor, mode="ignore")
        # Checked once the lock is ours (a person may lock the shell while we wait: they win), and
        # also before waiting for a lock someone else holds, so a manual lock refuses at once.
        lease = await self.writes.acquire(
            shell_id, actor=actor, before_wait=lambda: self.manual.check(shell_id, actor=actor)
        )
        try:
            self.manual.check(shell_id, actor=actor)
        except BaseException:
            lease.release()
            raise
        return lease

    @contextlib.asynccontextmanager
    async def hold(
        self, shell_id: str, *, actor: str, mode: LockMode = "require"
    ) -> AsyncIterator[WriteLease]:
        """``async with locks.hold(id, actor=…, mode=…) as lease:`` — released on any exit."""
        lease = await self.acquire(shell_id, actor=actor, mode=mode)
        try:
            yield lease
        finally:
            lease.release()

    def lock_state(self, shell_id: str) -> LockState:
        return LockState(
            shell_id=shell_id, manual=self.manual.get(shell_id), holder=self.writes.holder(shell_id)
        )

    def is_locked(self, shell_id: str, *, actor: str | None = None) -> bool:
        """Manual lock, or a write held by someone other than ``actor`` (anyone, if ``None``)."""
        state = self.lock_state(shell_id)
        if actor is None:
            return state.manual is not None or state.holder is not None
        return state.locked_for(actor)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def _wait_backoff(fd: int) -> None:
    step = 0
    while not _try_lock(fd):
        await asyncio.sleep(_BACKOFF_S[min(step, len(_BACKOFF_S) - 1)])
        step += 1


def _write_holder(fd: int, actor: str) -> None:
    # Overwritten in place, padded with spaces (JSON whitespace) to the file's size, never truncated:
    # on ext4 a truncate-to-zero of a file with data arms ``auto_da_alloc``, which flushes it on close
    # — about 3 ms on every write lock, serialising the tasks of one call on the disk.
    # The bytes ``json.dumps`` makes of {"actor": …, "pid": …, "since_ms": …}, without its encoder's
    # Python for the dict (the actor is the one value that needs escaping).
    data = b'{"actor": %s, "pid": %d, "since_ms": %d}' % (
        encode_basestring_ascii(actor).encode("ascii"),
        os.getpid(),
        int(time.time() * 1000),
    )
    size = os.fstat(fd).st_size
    os.pwrite(fd, data.ljust(max(size - 1, len(data))) + b"\n", 0)


def _read_holder(fd: int) -> LockHolder:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return LockHolder(actor=str(data["actor"]), pid=int(data["pid"]), since_ms=int(data["since_ms"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        # Held, but the holder has not written its name yet (or wrote something else).
        return LockHolder(actor="unknown", pid=0, since_ms=0)
