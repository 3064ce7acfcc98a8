"""Keeps tmux from crashing while a control client identifies itself.

tmux (3.2 to 3.6; fixed after, tmux/tmux#4980) writes some notifications to every client that
says it is a control client — ``%sessions-changed``, ``%client-detached``, ``%pane-mode-changed``,
``%paste-buffer-changed`` … — without checking that the client has finished identifying. A
client's identification arrives over two or more reads (each descriptor it passes ends a read),
and between them the server serves other clients; a notification then dereferences the new
client's control state, still NULL, and the server dies with every shell in it. On Debian 12's
tmux 3.3a, three processes starting and ending control clients at once killed it within seconds.

Invariant: while a tether control client of a server is identifying, no tether process does
anything that makes that server notify its control clients. Every process of a server takes one
file lock (``flock``, with a turnstile that keeps a connect from waiting behind a stream of
shell calls), ``Gate``:

- **exclusive** from spawning a control client until tmux answers its first command (tmux
  serves a client's commands only after its identification is complete);
- **shared** around what notifies every control client (``commands.notifies``) — a command
  that creates or kills a session, sets or deletes a paste buffer or leaves copy mode, held until
  its reply (tmux has written the notifications by then: it drains them before it reads anything
  else) — and around the end of a client that is attached (a control client, a person's terminal
  in the panel), held until the server has dropped it.

Shared holders never wait for each other, so a shell call pays two ``flock`` calls; they wait
only while another process connects. A holder that never lets go (a stopped process) is waited
for at most ``WAIT_S``, then the caller goes on without the lock, as tether did before: the lock
guards against tmux's bug, it must never hang tether. What tether does not do cannot take it:
a person's own ``tmux attach`` ending, or a process of tether killed with its client (the kernel
ends the client; tmux notifies the others as it notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

logger = logging.getLogger(__name__)

WAIT_S = 5.0
_POLL_S = 0.002


class Gate:
    """The lock of one tmux server, shared by every tether process that talks to it.

    Two files: the gate itself (``path``) and a turnstile beside it (``path`` + ``.queue``). A
    connect takes the turnstile and then the gate, both exclusive; a shared holder passes the
    turnstile (takes it shared and lets go once it holds the gate). So a connect waits only for
    the commands already in flight: without the turnstile, shell calls that follow each other
    without a pause (each holding the gate shared) would keep a new process out for good."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.queue = path.with_name(path.name + ".queue")

    def _open(self, path: Path) -> int | None:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            # A directory that cannot hold the lock (read-only, full) must not stop the shells:
            # tmux is then as safe as it is without tether's help.
            logger.warning("tmux gate %s cannot be opened (%s); going on without it", path, exc)
            return None

    async def _take(self, fd: int, how: int, deadline: float) -> bool:
        """Lock ``fd`` (polling, so the event loop runs); False once ``deadline`` has passed."""
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    logger.warning("tmux gate %s: %s; going on without it", self.path, exc)
                    return False
            if time.monotonic() >= deadline:
                logger.warning(
                    "tmux gate %s held for over %.0f s by another process; going on without it",
                    self.path,
                    WAIT_S,
                )
                return False
            await asyncio.sleep(_POLL_S)

    async def acquire(self, *, exclusive: bool) -> Held:
        """Take the gate (without blocking the event loop); the caller releases what it gets.
        Uncontended, this returns without yielding to the event loop."""
        deadline = time.monotonic() + WAIT_S
        fds = [fd for fd in (self._open(self.queue), self._open(self.path)) if fd is not None]
        held = Held(fds)
        try:
            if len(fds) == 2:
                turnstile, gate = fds
                how = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
                if await self._take(turnstile, how, deadline):
                    await self._take(gate, how, deadline)
                if not exclusive:
                    held.let_go(turnstile)
        except BaseException:
            held.release()
            raise
        return held

    @contextlib.asynccontextmanager
    async def shared(self, when: bool = True) -> AsyncIterator[None]:
        """Held shared around the block (nothing is taken when ``when`` is false)."""
        if not when:
            yield
            return
        held = await self.acquire(exclusive=False)
        try:
            yield
        finally:
            held.release()


class Held:
    """What one ``acquire`` took; ``release`` is idempotent (closing a descriptor drops its lock).
    The gate's descriptor is closed last, so the gate is never held exclusive without the
    turnstile."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def let_go(self, fd: int) -> None:
        self._fds.remove(fd)
        os.close(fd)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in reversed(fds):  # the gate, then the turnstile (if still held)
            os.close(fd)
