"""Local mirrors of the logs a remote host keeps: every read, search and wait runs on them.

Invariant: byte ``n`` of a mirror is byte ``n`` of the remote log, forever. The remote log is the
shell's whole output (tmux ``pipe-pane`` on that host); the mirror only ever grows by appending
what one stream reads from the remote log at exactly the mirror's own length (``tail -c +N -f``,
which GNU tail follows with inotify: event-driven, nothing polls over the network). A reconnect
resumes at the mirror's size, so nothing is lost or doubled however often the connection drops.

One process streams a given shell at a time: the stream holds an exclusive ``flock`` on the mirror
file for its life, and another tether process sharing the home follows the file it writes (its
inotify watcher sees the appends); when the holder ends, the next process that looks takes over.

A stream starts by printing the remote log's size (a line after a ``\\036`` mark, so whatever the
account's start-up files print first is skipped): a mirror holding that many bytes has *caught
up*, which ``synced`` awaits so a read right after a reconnect sees everything printed meanwhile.
A stream that ends without ``stop`` is reported (``ended``): its host may have dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.shells.logs import log_path, log_size
from tether.shells.tmux.commands import sh_quote
from tether.shells.wakeups import LogWatcher

logger = logging.getLogger(__name__)

_HEADER = b"\x1etether-mirror "
_CHUNK = 1 << 16
_STOP_S = 2.0

# (shell id, offset) -> a running ``ssh … sh -c stream_script(log, offset)`` with piped stdin/stdout
Spawn = Callable[[str, int], Awaitable[asyncio.subprocess.Process]]


def stream_script(log: str, offset: int) -> str:
    """The host's side of one stream: the log's size now, then every byte from ``offset`` on,
    until tether closes the channel's input (then ``tail`` is ended, even with nothing to print)."""
    return (
        f'f={sh_quote(log)}; : >> "$f" || exit 1; '
        'printf \'\\036tether-mirror %s\\n\' "$(wc -c < "$f")"; '
        f'tail -c +{offset + 1} -f "$f" & t=$!; cat > /dev/null; kill $t'
    )


@dataclass(slots=True, kw_only=True)
class _Stream:
    shell_id: str
    fd: int
    proc: asyncio.subprocess.Process
    start: int
    target: int | None = None  # the remote log's size when the stream began
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False
    task: asyncio.Task[None] | None = None


class LogMirror:
    """The mirrors of one host (``logs_dir``) and the streams this process runs into them."""

    def __init__(
        self,
        *,
        logs_dir: Path,
        watcher: LogWatcher,
        spawn: Spawn,
        ended: Callable[[str, int], None],
        grew: Callable[[str, int], None] | None = None,
    ) -> None:
        self.logs_dir = logs_dir
        self._watcher = watcher
        self._spawn = spawn
        self._ended = ended  # (shell id, ssh exit status) of a stream that ended unasked
        self._grew = grew  # (shell id, mirror size) after each append
        self._streams: dict[str, _Stream] = {}
        self._starting: dict[str, asyncio.Task[_Stream | None]] = {}

    def streaming(self) -> set[str]:
        return set(self._streams)

    async def ensure(self, shell_id: str) -> _Stream | None:
        """Stream the shell here unless a stream runs already (here, or in another process that
        holds the mirror's lock); the stream of this process, if it runs one."""
        found = self._streams.get(shell_id)
        if found is not None:
            return found
        starting = self._starting.get(shell_id)
        if starting is None:
            starting = asyncio.get_running_loop().create_task(self._start(shell_id))
            self._starting[shell_id] = starting
            starting.add_done_callback(lambda _t: self._starting.pop(shell_id, None))
        return await asyncio.shield(starting)

    async def _start(self, shell_id: str) -> _Stream | None:
        self.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = log_path(self.logs_dir, shell_id)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None  # another tether process streams this shell into the same file
        try:
            start = os.fstat(fd).st_size
            proc = await self._spawn(shell_id, start)
        except BaseException:
            os.close(fd)
            raise
        stream = _Stream(shell_id=shell_id, fd=fd, proc=proc, start=start)
        stream.task = asyncio.get_running_loop().create_task(self._pump(stream))
        self._streams[shell_id] = stream
        return stream

    async def _pump(self, s: _Stream) -> None:
        assert s.proc.stdout is not None
        head = b""
        size = s.start
        try:
            while True:
                data = await s.proc.stdout.read(_CHUNK)
                if not data:
                    break
                if s.target is None:
                    head += data
                    mark = head.find(_HEADER)
                    end = head.find(b"\n", mark) if mark >= 0 else -1
                    if end < 0:
                        head = head[-4096:]
                        continue
                    s.target = int(head[mark + len(_HEADER) : end].strip() or b"0")
                    if s.target < s.start:
                        logger.warning(
                            "the remote log of %s is shorter than its mirror (%d < %d bytes): it was "
                            "replaced on the host; only bytes past the mirror's end are copied",
                            s.shell_id,
                            s.target,
                            s.start,
                        )
                    data = head[end + 1 :]
                    head = b""
                    if size >= s.target:
                        s.caught_up.set()
                    if not data:
                        continue
                _write_all(s.fd, data)
                size += len(data)
                if s.target is not None and size >= s.target:
                    s.caught_up.set()
                if self._grew is not None:
                    self._grew(s.shell_id, size)
        finally:
            status = await s.proc.wait()
            self._streams.pop(s.shell_id, None)
            os.close(s.fd)  # releases the lock: another process may take over
            s.caught_up.set()  # nobody waits for a stream that is gone
            if not s.stopping:
                self._ended(s.shell_id, status)

    async def synced(
        self, shell_id: str, remote_size: Callable[[], Awaitable[int | None]], timeout: float
    ) -> None:
        """Return once the mirror holds what the remote log held when this look began (or after
        ``timeout``): from this process's stream, else by asking the host for the log's size."""
        stream = await self.ensure(shell_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if stream is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stream.caught_up.wait(), timeout)
            return
        want = await remote_size()
        if want is None:
            return
        path = log_path(self.logs_dir, shell_id)
        waker = self._watcher.waker(shell_id)
        try:
            while log_size(path) < want and loop.time() < deadline:
                waker.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waker.wait(), max(0.001, min(1.0, deadline - loop.time())))
                if shell_id not in self._streams and await self.ensure(shell_id) is not None:
                    # The other process let go: this one streams now.
                    await self.synced(shell_id, remote_size, max(0.0, deadline - loop.time()))
                    return
        finally:
            self._watcher.drop(shell_id, waker)

    async def stop(self, shell_id: str) -> None:
        starting = self._starting.get(shell_id)
        if starting is not None:
            with contextlib.suppress(Exception):
                await starting
        s = self._streams.get(shell_id)
        if s is None:
            return
        s.stopping = True
        if s.proc.stdin is not None:
            with contextlib.suppress(Exception):
                s.proc.stdin.close()  # the host ends tail, then the channel closes
        task = s.task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), _STOP_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                s.proc.kill()
            with contextlib.suppress(Exception):
                await task

    async def retain(self, live: set[str]) -> None:
        """Stop the streams of shells that are no longer live on the host."""
        for shell_id in [i for i in self._streams if i not in live]:
            await self.stop(shell_id)

    async def close(self) -> None:
        for shell_id in list(self._streams):
            await self.stop(shell_id)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
