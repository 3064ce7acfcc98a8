"""The channels of one remote host: each logs in, proves its command runs, and only then is told
what to be.

Invariant: no byte of a channel's protocol (a tmux command, a question to the command shell) is
written before the channel's own command runs on the host. sshd hands the channel's standard
input to the account's login shell, whose start-up files run first (bash reads ``~/.bashrc`` even
for a command) and may read it (``read x``). So a channel's command (``READY_SCRIPT``) first prints
a ready line; until tether has read that line, the channel's input carries only blank lines
(``FILLER``: whatever the start-up files read, they read those), which the command skips; then one
line (``GO`` + a script without a line break) says what the channel runs, ``exec sh -c`` on it.
``read`` in ``sh`` takes its input a byte at a time from a pipe, so the script's program reads
exactly what follows that line. A banner the start-up files print comes before the ready line,
and is skipped with everything else before it. A start-up file that reads more than the blank
lines (to the end of its input) never lets the command run: the channel fails after the login's
deadline, with a message naming the start-up files.

The login is the slow part of a channel on some hosts (start-up files that take seconds): channels
log in ahead (``prime``) — once the shared connection is up, alongside the probe — and one logged-in
channel is kept spare while the host has room for it, so opening a shell (its control client,
command shell and log stream) pays the login once rather than once per channel in sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from tether.shells.hosts.ssh.conn import ConnectionLost, HostError, SshConnection, remote_command

READY = b"\x1etether-channel\n"
GO = "tether-go:"
FILLER = b"\n" * 64  # lines a start-up file may read before the channel's command runs
READY_SCRIPT = (
    "printf '\\n\\036tether-channel\\n'; "
    f'while IFS= read -r l; do case $l in {GO}*) exec sh -c "${{l#{GO}}}";; esac; done; exit 1'
)
STDOUT_LIMIT = 64 * 1024 * 1024  # the longest line a channel's reader takes


class ChannelPool:
    """``take(script)``: a logged-in channel of ``conn`` running ``script``; ``prime`` logs in ahead."""

    def __init__(
        self,
        conn: SshConnection,
        *,
        room: Callable[[], bool],
        ended: Callable[[], None],
        lost: Callable[[], ConnectionLost],
    ) -> None:
        self._conn = conn
        self._room = room  # the host takes one more (spare) channel now
        self._ended = ended  # a channel ended before its command ran (the connection may be gone)
        self._lost = lost  # the host's one connection-lost error
        self._spares: deque[asyncio.Task[asyncio.subprocess.Process]] = deque()
        self._closed = False

    def prime(self, count: int) -> None:
        """Log ``count`` channels in now, in parallel (they wait for ``take``)."""
        loop = asyncio.get_running_loop()
        for _ in range(count):
            if self._closed:
                return
            task = loop.create_task(self._login())
            task.add_done_callback(_retrieve)
            self._spares.append(task)

    async def take(self, script: str) -> asyncio.subprocess.Process:
        """A channel running ``script`` (POSIX sh, one line) on the host; a spare if one is ready."""
        if "\n" in script:
            raise HostError(f"{self._conn.where}: a channel runs a one-line script, not {script!r}")
        while True:
            spare = self._spares.popleft() if self._spares else None
            task = spare if spare is not None else asyncio.ensure_future(self._login())
            try:
                proc = await asyncio.shield(task)
            except asyncio.CancelledError:
                if spare is not None and not task.done():
                    self._spares.appendleft(task)  # still logging in: the next taker gets it
                elif not task.done():
                    task.cancel()
                raise
            except HostError:
                if spare is not None:
                    continue  # a spare logged in under an older connection: log in afresh
                raise
            if proc.returncode is not None or proc.stdin is None or proc.stdin.is_closing():
                if spare is not None:
                    continue
                raise self._lost()
            proc.stdin.write(f"{GO}{script}\n".encode("utf-8", "surrogateescape"))
            if not self._spares and self._room():
                self.prime(1)
            return proc

    async def _login(self) -> asyncio.subprocess.Process:
        """An ``ssh -T`` channel whose command has announced itself (``READY``)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._conn.argv(remote_command(READY_SCRIPT), master="no"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=STDOUT_LIMIT,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise HostError(f"{self._conn.where}: ssh is not installed on this machine") from exc
        limit = self._conn.login_limit
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(FILLER)
            async with asyncio.timeout(limit):
                while True:
                    try:
                        line = await proc.stdout.readline()
                    except ValueError:
                        continue  # a banner line longer than the limit: skipped all the same
                    if not line:
                        # The login ended first, or the connection dropped: the host looks which.
                        self._ended()
                        raise self._lost()
                    if line.endswith(READY):
                        return proc
        except TimeoutError:
            await _end(proc)
            raise HostError(
                f"{self._conn.where}: logged in, but a channel's command did not start within {limit} s; "
                "check the account's shell start-up files there (ssh runs ~/.bashrc even for a command: "
                "one that waits, or reads its standard input to the end, stalls every channel), or raise "
                "connect_timeout"
            ) from None
        except BaseException:
            await _end(proc)
            raise

    async def drop(self) -> None:
        """End every spare (the connection they were logged in on is gone, or the host closes)."""
        spares, self._spares = list(self._spares), deque()
        for task in spares:
            task.cancel()
        for task in spares:
            with contextlib.suppress(BaseException):
                proc = await task
                await _end(proc)

    async def close(self) -> None:
        self._closed = True
        await self.drop()


async def _end(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(proc.wait(), 5.0)


def _retrieve(task: asyncio.Task[asyncio.subprocess.Process]) -> None:
    if not task.cancelled():
        task.exception()
