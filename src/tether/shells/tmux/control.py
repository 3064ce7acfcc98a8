"""One tmux control-mode client (``tmux -C``) per process: commands at ~0.1 ms instead of a fork.

Invariant: replies are matched to commands strictly in order. tmux answers every command it reads
from a control client with exactly one ``%begin … %end`` (or ``%error``) block whose flags field is
1, in the order the commands were written; blocks with flags 0 (the initial attach) and
notifications (``%window-add``, ``%output`` …) between blocks are not replies. Lines inside a block
are output even when they start with ``%`` (``display -p '#{pane_id}'`` prints ``%3``).

If no server runs yet, this client starts it, with the environment it was given (tether passes the
credential-scrubbed environment, so shells never inherit the server process's secrets).

The client attaches to a hidden hub session holding one idle pane, so it receives no ``%output``
for any shell; pane output reaches tether through ``pipe-pane`` logs (see ``logs``). If tmux or the
client dies, pending commands fail with ``SessionError`` and the next command starts a new client.
A client that answers nothing for ``ANSWER_S`` while commands wait (its server stopped, a remote
host's network gone silent) is ended the same way, with an error that says so: no call waits on
tmux for ever.

Commands issued during one event-loop iteration leave in one pipe write, on the next iteration
(``_flush``): every write to tmux's stdin wakes the server, and on a busy machine the writer pays
for that switch, so sixteen tasks of one call querying at once cost one wake-up, not sixteen. A
run's keys are the exception (``run_many(now=True)``): they leave at once, with whatever was
queued before them, because a command waits for them while the call's other shells are judged;
so does the listing asked for a call still being parsed (``query_now``).
The order of ``_pending`` is the order of the bytes written, so replies still match. ``run_shared``
lets identical read-only queries of one iteration share one command: the query is written after
every sharer asked, so each of them still gets an answer read after its own request.

The client ends with this process, however it ends: the kernel kills it when its parent ends
(``setpriv --pdeathsig KILL``, where util-linux has it). The EOF on its stdin alone would not do:
tmux hands a client's stdin to the server, which ends the client once it reads the EOF there (on
a loaded machine it once did not within a minute), and a client told to end asks the server too.

Every process of one tmux server takes its ``Gate`` around connecting, around commands that make
tmux notify every control client, and around ending its client (``gate``: tmux before 3.7 crashes
when one of those notifications meets a control client still identifying itself).

The tmux server daemonizes away from the client that started it. tether being a subreaper
(``process.tree``), the orphan would be handed to us, and with it, for the rest of our life, every
process its shells orphan, each ending as a zombie of ours that nothing reaps: adoption is paused
(``pause_adoption``) from the spawn until the first reply, so the server goes to PID 1. A server
that still ends as a zombie of ours (adopted some other way) is collected (``reap_adopted``)
where the end is observed: when the reader ends, before a new client starts, and on ``close``;
the client learns the server's pid with its first command.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import stat
from collections import deque
from collections.abc import Callable
from pathlib import Path

from tether.config import EnvSection
from tether.errors import TetherError
from tether.process.adopt import OWN_PROCESS
from tether.process.env import scrub_environment
from tether.process.tree import end_child, pause_adoption, reap_adopted
from tether.shells.tmux import commands
from tether.shells.tmux.commands import notifies
from tether.shells.tmux.gate import Gate, Held

logger = logging.getLogger(__name__)

SOCKET_PATH_MAX = 107  # sun_path's 108 bytes, the last one its NUL
LINE_MAX = 16 * 1024 * 1024  # the longest line of a reply (a capture of a pane's longest line)
_CHUNK = 256 * 1024


class SessionError(TetherError):
    """tmux refused a command or could not be reached."""

    code = "SESSION_ERROR"


class ClientEnded(SessionError):
    """The control client ended before tmux answered (the server went away meanwhile)."""


def quote(arg: str) -> str:
    """Quote one argument for tmux's command parser.

    Plain text goes in single quotes (nothing inside is special; ``'`` is spliced as ``'\\''``).
    Text holding a line break, a control character or raw bytes (lone surrogates from
    ``surrogateescape``) goes in double quotes, where tmux's parser turns ``\\ooo`` into that byte
    and ``\\$`` / ``\\"`` / ``\\\\`` into themselves: every byte arrives exactly, and a line break
    can never end the command early.

    No argument is kept: the commands a call repeats (the listings with their formats, quoted
    byte by byte for their tabs) are kept whole by ``_line``, and any other argument may be text
    typed into a shell (a vault value typed into a program's prompt, a run's payload).
    """
    if arg.isprintable():
        return "'" + arg.replace("'", "'\\''") + "'"
    out = ['"']
    for ch in arg:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a raw byte carried by surrogateescape
            out.append(f"\\{code - 0xDC00:03o}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        elif ch in '"\\$~':
            out.append("\\" + ch if ch != "~" else "\\176")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def command_line(args: tuple[str, ...] | list[str]) -> str:
    return " ".join(quote(a) for a in args)


def _line(args: tuple[str, ...] | list[str]) -> bytes:
    """One command's line as written to tmux. Those a call repeats for each shell
    (``commands.repeated``) come from a cache: quoting them cost more than the rest of typing a
    run. Text typed (``send-keys -l``, a paste buffer's data) is never kept."""
    if type(args) is tuple and commands.repeated(args):
        return _cached_line(args)
    return command_line(args).encode("utf-8") + b"\n"


@functools.lru_cache(maxsize=512)
def _cached_line(args: tuple[str, ...]) -> bytes:
    return command_line(args).encode("utf-8") + b"\n"


class ControlClient:
    """A lazily (re)started ``tmux -S SOCKET -C new-session -A -s tether-hub`` child."""

    def __init__(self, socket: Path, *, gate: Path, env: dict[str, str] | None = None) -> None:
        self.socket = socket
        self.gate = Gate(gate)
        # The environment a tmux server started by this client (and so every shell) inherits:
        # never the raw process environment, whose credentials shells would read in
        # /proc/$PPID/environ of the server.
        self.env = env if env is not None else scrub_environment(os.environ, EnvSection())
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: deque[asyncio.Future[list[str]]] = deque()
        self._start_lock = asyncio.Lock()
        # Bytes queued for the next flush, the child they are for, and this iteration's shared queries.
        self._out: list[bytes] = []
        self._out_proc: asyncio.subprocess.Process | None = None
        self._shared: dict[bytes, asyncio.Future[list[str]]] = {}
        self._server_pid = 0  # the tmux server this client talks to (0 = not known yet)
        # The watchdog: since when (loop time) the client owes an answer and has given none — the
        # later of its last reply and the moment a command was queued with none waiting —, its
        # timer, and whether this client was ended for not answering.
        self._owed_since = 0.0
        self._watch: asyncio.TimerHandle | None = None
        self._wedged = False

    async def _ensure(self) -> asyncio.subprocess.Process:
        proc = self._proc
        if (
            proc is not None
            and proc.returncode is None
            and self._reader is not None
            and not self._reader.done()
        ):
            return proc
        async with self._start_lock:
            if (
                self._proc is not None
                and self._proc.returncode is None
                and self._reader
                and not self._reader.done()
            ):
                return self._proc
            stale = self._proc
            if stale is not None and stale.returncode is None:
                # Its reader ended (tmux said %exit) but the child lingers: end it before replacing it.
                async with self.gate.shared():
                    with contextlib.suppress(ProcessLookupError):
                        stale.kill()
                    await stale.wait()
                    await self._dropped(stale.pid)
            self._reap_server()
            if len(os.fsencode(self.socket)) > SOCKET_PATH_MAX:
                raise SessionError(
                    f"the tmux socket {self.socket} would be {len(os.fsencode(self.socket))} bytes long, and "
                    f"a unix socket's path holds at most {SOCKET_PATH_MAX}: set TETHER_HOME to a shorter "
                    "path (persistent shells keep their tmux server's socket in it)"
                )
            self._check_socket_path()
            await self._before_spawn()
            # Exclusive until tmux answers the first command: no process of this server makes
            # tmux notify its control clients while this one identifies itself (see ``gate``).
            held = await self.gate.acquire(exclusive=True)
            # The server this client may start daemonizes at once; it has answered (so it has
            # daemonized, to PID 1 and not to us) by the time the first reply comes.
            resume = self._pause_adoption()
            try:
                proc = await self._spawn()
            except FileNotFoundError as exc:
                held.release()
                resume()
                raise SessionError(
                    "tmux is not installed (persistent shells need tmux ≥ 3.2 on PATH)"
                ) from exc
            except BaseException:
                held.release()
                resume()
                raise
            self._proc = proc
            self._wedged = False
            self._reader = asyncio.get_running_loop().create_task(self._read(proc))
            # Written in the same flush as the caller's first command: no extra round trip.
            (fut,) = self._queue(proc, _line(commands.server_pid()), 1)
            fut.add_done_callback(self._got_server_pid)
            fut.add_done_callback(functools.partial(_release, held))
            fut.add_done_callback(lambda _fut: resume())
            return proc

    def _check_socket_path(self) -> None:
        """A directory where the socket belongs: tmux can neither connect nor listen there, and its
        client ended with its reason on stderr, which nobody reads, after every retry (~40 s)."""
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(self.socket).st_mode):
                raise SessionError(
                    f"the tmux socket {self.socket} is a directory, so tmux can neither start nor reach "
                    "its server there: remove or rename that directory (persistent shells keep their "
                    "tmux server's socket at that path)"
                )

    def _pause_adoption(self) -> Callable[[], None]:
        """Keep a tmux server this client starts from becoming our child (``pause_adoption``)."""
        return pause_adoption()

    async def _before_spawn(self) -> None:
        """What must be ready before a client is spawned (nothing here; a remote host's connection)."""

    def _got_server_pid(self, fut: asyncio.Future[list[str]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        with contextlib.suppress(ValueError, IndexError):
            self._server_pid = int(fut.result()[0])

    def _reap_server(self) -> None:
        """Collect the tmux server if it has ended as a zombie of ours (never waits)."""
        if self._server_pid and reap_adopted(self._server_pid):
            self._server_pid = 0

    async def _spawn(self) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *_dying_with_us(commands.control_argv(self.socket)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=LINE_MAX,
            start_new_session=True,
            # A tmux server this client starts is tether's own (``OWN_PROCESS``): started from a
            # command inside a shell, it outlives that shell. Its panes do not keep the mark.
            env={**self.env, OWN_PROCESS: "tmux-server"},
        )

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        """Replies, read a chunk at a time and cut into lines here (a ``readline`` a line cost
        more than the rest of a reply's handling: a shell's run is ten lines)."""
        assert proc.stdout is not None
        stdout = proc.stdout
        block: list[str] | None = None
        mine = False
        partial: list[bytes] = []  # the start of a line whose end has not come yet
        held = 0
        try:
            while True:
                chunk = await stdout.read(_CHUNK)
                if chunk:
                    lines = chunk.split(b"\n")
                    tail = lines.pop()
                    if lines and partial:
                        partial.append(lines[0])
                        lines[0], partial, held = b"".join(partial), [], 0
                    if tail:
                        partial.append(tail)
                        held += len(tail)
                        if held > LINE_MAX:
                            raise ValueError(f"a line from tmux over {LINE_MAX} bytes")
                elif partial:  # the end: a last line without its newline
                    lines, partial = [b"".join(partial)], []
                else:
                    break
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    if block is None:
                        if line.startswith("%begin "):
                            block, mine = [], line.split(" ")[-1] == "1"
                        elif line.startswith("%exit"):
                            return
                        continue
                    if line.startswith(("%end ", "%error ")):
                        failed = line.startswith("%error ")
                        if mine and self._pending:
                            self._owed_since = asyncio.get_running_loop().time()
                            fut = self._pending.popleft()
                            if not fut.done():
                                if failed:
                                    fut.set_exception(SessionError("tmux: " + " ".join(block).strip()))
                                else:
                                    fut.set_result(block)
                        block = None
                        continue
                    block.append(line)
        finally:
            while self._pending:
                fut = self._pending.popleft()
                if not fut.done():
                    fut.set_exception(
                        self._unanswered()
                        if self._wedged
                        else ClientEnded("the tmux control client ended (is the tmux server gone?)")
                    )
            self._reap_server()

    def _unanswered(self) -> TetherError:
        """The error of commands a client was ended for not answering (not retried: a new client
        of a stopped server would wait as long again)."""
        return SessionError(
            f"tmux did not answer within {ANSWER_S:g} s (is its server stopped, or this machine "
            "overloaded?); the command may or may not have run, and the next call starts a new client"
        )

    def _arm(self, proc: asyncio.subprocess.Process) -> None:
        """Watch the commands now waiting: no reply at all within ``ANSWER_S`` ends the client.
        The timer is set from ``_owed_since``, never from when it was first armed: a timer armed
        for commands answered since (a call a moment earlier) would otherwise, on finding replies,
        wait a whole ``ANSWER_S`` more, and a client gone silent right after answering was ended
        only after twice the bound."""
        if self._watch is None and self._pending:
            self._watch = asyncio.get_running_loop().call_at(self._owed_since + ANSWER_S, self._check, proc)

    def _check(self, proc: asyncio.subprocess.Process) -> None:
        self._watch = None
        if proc is not self._proc or proc.returncode is not None or not self._pending:
            return
        # A timer may run a clock tick early (asyncio's resolution): that is the deadline too.
        if asyncio.get_running_loop().time() + 0.001 >= self._owed_since + ANSWER_S:
            logger.warning("tmux did not answer within %g s; ending its control client", ANSWER_S)
            self._wedged = True
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # Its output does not end with it while the server lives: tmux writes a control
            # client's output itself, through the descriptor the client handed it. So its reader
            # is stopped here, failing every waiting command with ``_unanswered``.
            if self._reader is not None:
                self._reader.cancel()
            return
        self._arm(proc)

    def _queue(
        self, proc: asyncio.subprocess.Process, data: bytes, count: int
    ) -> list[asyncio.Future[list[str]]]:
        """Queue ``count`` commands' bytes for the next flush; their reply futures, in order."""
        loop = asyncio.get_running_loop()
        if self._out_proc is not proc:
            self._flush()  # bytes for a replaced child go to it (its reader fails their futures)
        if not self._out:
            self._out_proc = proc
            loop.call_soon(self._flush)
        futs: list[asyncio.Future[list[str]]] = [loop.create_future() for _ in range(count)]
        if not self._pending:
            self._owed_since = loop.time()
        self._pending.extend(futs)
        self._out.append(data)
        self._arm(proc)
        return futs

    def _flush(self) -> None:
        data, proc = b"".join(self._out), self._out_proc
        self._out, self._out_proc = [], None
        self._shared.clear()
        if data and proc is not None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError):  # tmux gone: its reader fails the futures
                proc.stdin.write(data)

    async def run(self, *args: str) -> list[str]:
        """Run one tmux command; its output lines, or ``SessionError`` with tmux's message.

        A command written to a client whose server had just gone (its reader had not seen the end
        yet) is sent once more to a fresh client, which starts a new server."""
        notifying = notifies([args])
        for attempt in (0, 1):
            proc = await self._ensure()
            async with self.gate.shared(notifying):
                (fut,) = self._queue(proc, _line(args), 1)
                try:
                    return await fut
                except ClientEnded:
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    async def run_shared(self, *args: str) -> list[str]:
        """``run`` for a read-only query: callers of one loop iteration share one command, written
        after all of them asked (so the answer is as fresh as a command of one's own)."""
        proc = await self._ensure()
        line = _line(args)
        fut = self._shared.get(line)
        if fut is None or self._out_proc is not proc:
            (fut,) = self._queue(proc, line, 1)
            self._shared[line] = fut
        # Shielded: one sharer's cancellation must not cancel the answer the others wait for.
        return await asyncio.shield(fut)

    def query_now(self, commands: list[tuple[str, ...]]) -> list[asyncio.Future[list[str]]] | None:
        """Read-only queries written before this returns (one write, with whatever was queued
        before them), their reply futures in order; ``None`` with nothing written while no client
        is up (``run`` and ``run_shared`` start one)."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self._reader is None or self._reader.done():
            return None
        data = b"".join(_line(c) for c in commands)
        futs = self._queue(proc, data, len(commands))
        self._flush()
        return futs

    async def run_many(
        self, commands: list[tuple[str, ...]], *, now: bool = False, resend: bool = True
    ) -> list[list[str]]:
        """Write several commands at once (one write, one round trip) and await every reply; sent
        once more to a fresh client if none of them was answered before the old one ended.
        ``now``: written before this first waits (with whatever was queued before them).
        ``resend=False`` for commands that must not run twice (creating a session): the client may
        have ended after tmux ran them and before their answer came, so ``ClientEnded`` is raised
        instead, and the caller finds out what exists."""
        data = b"".join(_line(c) for c in commands)
        notifying = notifies(commands)
        for attempt in (0, 1):
            proc = await self._ensure()
            async with self.gate.shared(notifying):
                futs = self._queue(proc, data, len(commands))
                if now:
                    self._flush()
                results = await asyncio.gather(*futs, return_exceptions=True)
            if resend and attempt == 0 and results and all(isinstance(r, ClientEnded) for r in results):
                continue
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            return [r for r in results if not isinstance(r, BaseException)]
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self._flush()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        # tmux tells every control client that this one left: not while another identifies.
        async with self.gate.shared():
            await end_child(proc)
            if self._reader is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await self._reader
            await self._dropped(proc.pid)
        self._reap_server()

    async def _dropped(self, pid: int) -> None:
        """Return once the server no longer lists the client ``pid`` (it has told the others it
        left), asking with a plain command client, which is never notified of anything; at most
        ``DROP_WAIT_S``, and at once when no server answers."""
        deadline = asyncio.get_running_loop().time() + DROP_WAIT_S
        argv = commands.client_argv(self.socket, commands.list_client_pids())
        while True:
            try:
                child = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=self.env,
                )
            except OSError:
                return
            out, _ = await child.communicate()
            if child.returncode != 0 or str(pid) not in out.decode("ascii", "replace").split():
                return
            if asyncio.get_running_loop().time() >= deadline:
                return
            await asyncio.sleep(0.005)


DROP_WAIT_S = 1.0
ANSWER_S = 15.0  # no reply at all for this long while commands wait: the client is wedged


def _release(held: Held, _done: object) -> None:
    held.release()


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def _dying_with_us(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel kills it when this process ends (a fork of it, the
    tmux server it may start, does not inherit that); as it is where ``setpriv`` is missing."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv
