"""A host on another machine, reached with OpenSSH: tmux there keeps its shells.

Invariant: the host's tmux server, the shells and their full logs live on that machine, under
its ``tether_home`` (never shared with this machine's state, even when the "remote" machine is
this one); this machine keeps only a mirror of each log (``mirror``) under
``$TETHER_HOME/hosts/NAME/logs``, so reads, searches, waits and the timeline work on local files
exactly as for ``hosts.local``. Three kinds of channel share the host's one connection (``conn``):
the tmux control client (``tmux -C`` over ``ssh -T``: commands, typing — a vault value travels in
it, never on a command line or in a file), one log stream per shell, and one ``sh`` for process
facts and small file questions (``sh``, asked through ``questions``). Files tether needs there
(start-up files, a revived shell's first bytes) are written by tmux ``set-buffer`` +
``save-buffer`` over the control connection; the host needs only sshd, tmux ≥ 3.2 and a POSIX
shell. Where it also has a ``python3`` with ctypes, each shell's bash keeps what its processes
orphan (``process.adopt``), and closing the shell ends all of it (``sweep``).

A dropped connection loses nothing there: every channel ends, the host's connection mark moves
on (a wait that was following it ends with ``ConnectionLost``), a reconnect is tried at once, and
the next call reconnects if that failed; each log stream resumes at its mirror's size. A host
that cannot be reached fails the call that needs it within the connect timeout; calls that only
look around (listing every host) skip it for ``BACKOFF_S`` after a failure rather than wait again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tether.config import Config, HostSection, ensure_home
from tether.errors import TetherError
from tether.process.adopt import OWN_PROCESS, adopting_command
from tether.shells.host import Leftovers, ShellHost, ShellStart
from tether.shells.hosts.ssh.channels import ChannelPool
from tether.shells.hosts.ssh.conn import (
    ConnectionLost,
    HostError,
    HostFacts,
    HostUnsuitable,
    SshConnection,
    home_expression,
    remote_command,
)
from tether.shells.hosts.ssh.mirror import LogMirror, stream_script
from tether.shells.hosts.ssh.procs import PaneProcs
from tether.shells.hosts.ssh.questions import RemoteQuestions
from tether.shells.hosts.ssh.sh import RemoteShell
from tether.shells.hosts.ssh.sweep import Sweeper
from tether.shells.logs import read_range
from tether.shells.safety import call_notes
from tether.shells.safety.call_notes import CallNotes
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo, sh_quote
from tether.shells.tmux.control import ANSWER_S, ClientEnded, ControlClient, SessionError
from tether.shells.wakeups import LogWatcher

logger = logging.getLogger(__name__)

BACKOFF_S = 10.0
_FIRST_CHANNELS = 3  # the control client, the command shell, a spare (a shell's log stream)
_MAX_SESSIONS = 10  # sshd's default MaxSessions: channels one connection may carry
_SYNC_S = 10.0  # at most this long for a mirror to catch up after a (re)connect
_SOCKET_WORD = "/@tether-socket@"  # placeholder for the socket in a command built for the host's shell


def _no_pause() -> None:
    return None


def _words(argv: list[str]) -> str:
    return " ".join('"$h"/tmux.sock' if a == _SOCKET_WORD else sh_quote(a) for a in argv)


class SshControlClient(ControlClient):
    """The control client of a remote tmux server: ``tmux -C`` on the host, over ssh. tmux
    there is started by it (umask 077: every file the server or this client writes is 0600)."""

    def __init__(self, host: SshHost, *, gate: Path) -> None:
        super().__init__(Path(host.section.tether_home) / "tmux.sock", gate=gate)
        self._host = host
        self._closing = False

    async def _before_spawn(self) -> None:
        await self._host.connection()

    def _check_socket_path(self) -> None:
        """The socket is on the other machine: nothing here can look at it."""

    async def _spawn(self) -> asyncio.subprocess.Process:
        await self._host.connection()
        self._closing = False
        script = f"umask 077; h={home_expression(self._host.section.tether_home)}; exec " + _words(
            commands.control_argv(Path(_SOCKET_WORD))
        )
        return await self._host.channel(script)

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await super()._read(proc)
        finally:
            if not self._closing:
                self._host.channel_ended()

    def _reap_server(self) -> None:
        """The server runs on the other machine: nothing of ours to collect."""

    def _pause_adoption(self) -> Callable[[], None]:
        """The server starts on the other machine: nothing here to keep from becoming ours."""
        return _no_pause

    async def _dropped(self, pid: int) -> None:
        """The client's pid there is not known here: the gate is held while it ends, no longer."""

    def _unanswered(self) -> TetherError:
        return ConnectionLost(
            f"{self._host.conn.where}: tmux there did not answer within {ANSWER_S:g} s (the network "
            "stopped answering, or its tmux server is stopped); the command may or may not have run, "
            "and the next call starts a new channel"
        )

    async def close(self) -> None:
        self._closing = True
        await super().close()


class SshHost(RemoteQuestions, ShellHost):
    """Shells in tmux on another machine (see the module docstring)."""

    def __init__(self, config: Config, section: HostSection) -> None:
        super().__init__()
        self.name = section.name
        self.section = section
        self.config = config
        home = ensure_home(config.home)
        for private in (home / "hosts", home / "hosts" / section.name):
            private.mkdir(mode=0o700, exist_ok=True)
        self.logs_dir = home / "hosts" / section.name / "logs"
        self.conn = SshConnection(section, home)
        # The gate is this machine's: every tether process of this home that reaches the host.
        self.control = SshControlClient(self, gate=home / "hosts" / section.name / "tmux.gate")
        self.watcher = LogWatcher(self.logs_dir, cap=config.sessions.log_max_bytes)
        self.pool = ChannelPool(
            self.conn, room=self._room_for_spare, ended=self.channel_ended, lost=self._lost_error
        )
        self.sh = RemoteShell(where=self.conn.where, spawn=self._spawn_sh, ended=self.channel_ended)
        self.mirror = LogMirror(
            logs_dir=self.logs_dir,
            watcher=self.watcher,
            spawn=self._spawn_stream,
            ended=lambda _shell, _status: self.channel_ended(),
            grew=self._grew,
        )
        self._generation = 0
        # The last failed connect: when, why, and the tool call it failed in.
        self._down: tuple[float, HostError, CallNotes | None] | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._followed: set[str] = set()  # shells whose log this process mirrors
        self._synced: dict[str, int] = {}  # shell -> connection mark its mirror was last synced in
        self._procs: dict[tuple[str, bool], tuple[float, asyncio.Task[PaneProcs]]] = {}
        self._configured = -1  # the connection mark the server options were set in
        self._trimmed: dict[str, int] = {}
        # What a closed or respawned shell left running there ends with it (``sweep``).
        self.sweeper = Sweeper(
            name=self.name, sh=self.sh, grace_s=config.shell.grace_ms / 1000, spawn=self._adopt
        )

    def start(self) -> None:
        self.watcher.start()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self.pool.close()
        await self.mirror.close()
        await self.sh.close()
        await super().close()  # the shared connection stays (ControlPersist) for the next process

    # ---- the connection -----------------------------------------------------------------------

    async def connection(self, *, force: bool = False) -> HostFacts:
        """The host's facts, connecting first if needed; within ``BACKOFF_S`` of a failure the
        same error again at once, unless ``force``."""
        facts = self.conn.facts
        if facts is not None:
            return facts
        if self._down is not None and not force and time.monotonic() - self._down[0] < BACKOFF_S:
            raise self._down[1]
        try:
            facts = await self.conn.ensure(connected=self._connected)
        except HostError as exc:
            self._down = (time.monotonic(), exc, call_notes.current())
            await self.pool.drop()  # logged in for a host found unusable: nothing stays there
            raise
        self._down = None
        self._spawn_task(self._warm())
        return facts

    async def connect(self) -> None:
        # Once per tool call: a call that already failed to connect does not wait a second time.
        down, notes = self._down, call_notes.current()
        if down is not None and notes is not None and down[2] is notes:
            raise down[1]
        await self.connection(force=True)

    def _connected(self) -> None:
        """The shared connection is up (the probe has not answered yet): log in the channels a
        first call needs — the control client, the command shell and one spare for a shell's log
        stream — alongside the probe, so their logins cost the time of one."""
        self.pool.prime(_FIRST_CHANNELS)

    def _room_for_spare(self) -> bool:
        """sshd's default ``MaxSessions`` (10) counts every channel of the shared connection: a
        spare is kept only while it fits beside the control client, the command shell and the
        log streams."""
        return len(self.mirror.streaming()) + _FIRST_CHANNELS <= _MAX_SESSIONS

    async def _warm(self) -> None:
        """Open the control client and the command shell at once (each costs the account's
        start-up files on the host), rather than one after the other on first use."""
        await asyncio.gather(
            self.control.run(*commands.server_pid()), self.sh.run(":"), return_exceptions=True
        )

    def connection_mark(self) -> int:
        return self._generation

    def check_connection(self, mark: int) -> None:
        if mark != self._generation:
            raise self._lost_error()

    def lost_in_wait(self, exc: Exception) -> Exception:
        # Whichever call found the connection gone (the command shell's channel, a cached failed
        # reconnect, the control client), the wait reports the drop with the one documented text.
        return self._lost_error() if isinstance(exc, HostError) else exc

    def _lost_error(self) -> ConnectionLost:
        return ConnectionLost(
            f"connection to {self.name} lost; reconnecting (the shell keeps running on {self.name}; the "
            "next call reconnects — shell_read with wait kind exit picks up the latest run)"
        )

    async def channel(self, script: str) -> asyncio.subprocess.Process:
        """An ``ssh -T`` channel running ``script`` (POSIX sh, one line) on the host, stdin/stdout
        piped; logged in ahead where one is spare (``channels``)."""
        await self.connection()
        try:
            return await self.pool.take(script)
        except ConnectionLost:
            # The master was gone before the channel's command ran (nothing ran there): once the
            # host has noticed (and so reconnects), the channel logs in again through the new one.
            await self._check_master()
            if self.conn.facts is not None:
                raise
        await self.connection(force=True)
        return await self.pool.take(script)

    def channel_ended(self) -> None:
        """A channel ended unasked: if the master is gone too, the connection was lost."""
        if self._closed or self.conn.facts is None:
            return
        self._spawn_task(self._check_master())

    async def _check_master(self) -> None:
        if self.conn.facts is None or await self.conn.master_alive():
            return
        self._lost()

    def _lost(self) -> None:
        if self.conn.facts is None:
            return
        logger.warning("connection to host %s lost; reconnecting", self.name)
        self.conn.forget()
        self._generation += 1
        self._spawn_task(self.pool.drop())  # logged in on the connection that is gone
        self.watcher.wake_all()  # every wait on this host looks at its connection mark now
        self._spawn_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            await self.connection(force=True)
        except HostError as exc:
            logger.warning("host %s: reconnecting failed: %s", self.name, exc.message)
            return
        for shell_id in sorted(self._followed):
            self._follow(shell_id)

    def _adopt(self, task: asyncio.Task[None]) -> None:
        """Keep ``task`` until it ends; the host's close cancels it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_task(self, coro: object) -> None:
        if self._closed:
            if asyncio.iscoroutine(coro):
                coro.close()
            return
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn_sh(self) -> asyncio.subprocess.Process:
        return await self.channel("exec sh")

    async def _spawn_stream(self, shell_id: str, offset: int) -> asyncio.subprocess.Process:
        facts = await self.connection()
        return await self.channel(stream_script(facts.log(shell_id), offset))

    # ---- mirrors -------------------------------------------------------------------------------

    def _follow(self, shell_id: str) -> None:
        """Mirror the shell's log from now on (a stream starts in the background)."""
        self._followed.add(shell_id)
        if shell_id not in self.mirror.streaming():
            self._spawn_task(self._ensure_stream(shell_id))

    async def _ensure_stream(self, shell_id: str) -> None:
        try:
            await self.mirror.ensure(shell_id)
        except HostError as exc:
            logger.info("host %s: no log stream for %s: %s", self.name, shell_id, exc.message)

    async def _sync(self, shell_id: str) -> None:
        """The mirror holds what the host's log held when this look began (once per connection)."""
        self._followed.add(shell_id)
        if self._synced.get(shell_id) == self._generation:
            await self.mirror.ensure(shell_id)
            return
        mark = self._generation
        await self.mirror.synced(shell_id, lambda: self._remote_size(shell_id), _SYNC_S)
        self._synced[shell_id] = mark

    async def _remote_size(self, shell_id: str) -> int | None:
        facts = await self.connection()
        reply = await self.sh.run(f"wc -c < {sh_quote(facts.log(shell_id))}")
        text = reply.out.strip()
        return int(text) if reply.status == 0 and text.isdigit() else None

    def _grew(self, shell_id: str, size: int) -> None:
        """Keep the host's copy under the log cap too: its oldest bytes are in the mirror already
        (punched with ``fallocate`` where the host has it; otherwise the host keeps them)."""
        cap = self.config.sessions.log_max_bytes
        if size - self._trimmed.get(shell_id, 0) <= cap:
            return
        cut = ((size - cap // 2) // 4096) * 4096
        self._trimmed[shell_id] = cut
        facts = self.conn.facts
        if facts is not None:
            log = sh_quote(facts.log(shell_id))
            script = f"command -v fallocate >/dev/null && fallocate -p -o 0 -l {cut} {log}"
            self._spawn_task(self._quiet(script))

    async def _quiet(self, script: str) -> None:
        with contextlib.suppress(HostError):
            await self.sh.run(script)

    # ---- panes ----------------------------------------------------------------------------------

    async def _query(self, cmd: commands.Cmd) -> list[str]:
        try:
            return await self.control.run(*cmd)
        except ClientEnded as exc:
            raise self._lost_error() from exc

    async def _run_many(self, cmds: list[commands.Cmd], *, resend: bool = True) -> None:
        # The control client ending under the commands is the connection dropping, as in _query.
        try:
            await self.control.run_many(cmds, resend=resend)
        except ClientEnded as exc:
            raise self._lost_error() from exc

    async def panes(self, *, lean: bool = False, only: Sequence[str] | None = None) -> dict[str, PaneInfo]:
        # Always the whole listing: over ssh, the round trip costs far more than tmux's /proc reads
        # or its formatting of every pane, and the mirror keeps the logs of the shells it lists;
        # ``only`` narrows the answer, not the question.
        await self.connection()
        try:
            lines = await self._query(commands.list_panes())
        except ConnectionLost:
            raise
        except SessionError:
            lines = []
        panes = {p.shell_id: p for p in map(commands.parse_pane, lines) if p is not None}
        self._panes = panes
        await self.mirror.retain(set(panes))
        self._followed &= set(panes)
        for shell_id in panes:
            self._follow(shell_id)
        if only is not None:  # asked of these shells alone: the others are not an answer to it
            return {shell_id: pane for shell_id, pane in panes.items() if shell_id in only}
        return panes

    async def pane(self, shell_id: str) -> PaneInfo:
        # Asking tmux costs the round trip a liveness check would: always ask.
        return await self.pane_now(shell_id)

    async def pane_now(self, shell_id: str) -> PaneInfo:
        pane = await super().pane_now(shell_id)
        await self._sync(shell_id)
        return pane

    async def _tmux_lines(self, command: commands.Cmd) -> list[str]:
        return await self._query(command)

    def _where(self) -> str:
        return f" on host {self.name}"

    async def alive(self, pane: PaneInfo) -> bool:
        try:
            lines = await self._query(commands.pane_alive(pane.pane_id))
        except ConnectionLost:
            raise
        except SessionError:
            return False
        parts = lines[0].split() if lines else []
        ok = len(parts) == 2 and parts[0] == str(pane.pid) and parts[1] != "1"
        if ok and pane.shell_id not in self.mirror.streaming():
            self._follow(pane.shell_id)  # the process that streamed it let go: take over
        return ok

    def release(self, shell_id: str) -> None:
        super().release(shell_id)
        self._followed.discard(shell_id)
        self._synced.pop(shell_id, None)
        self._trimmed.pop(shell_id, None)
        for terminal in (False, True):
            self._procs.pop((shell_id, terminal), None)

    def held(self) -> set[str]:
        return super().held() | self._followed | {*self._synced, *self._trimmed} | {s for s, _ in self._procs}

    # ---- creating shells --------------------------------------------------------------------------

    def _configure(self) -> list[commands.Cmd]:
        if self._configured == self._generation:
            return []
        self._configured = self._generation
        return commands.server_options()

    @staticmethod
    def _put_file(path: str, text: str) -> list[commands.Cmd]:
        """Write ``text`` (any bytes, as surrogate-escaped str) to ``path`` on the host."""
        buf = "tether-file-" + secrets.token_hex(6)
        return [commands.set_buffer(buf, text), commands.save_buffer(buf, path), commands.delete_buffer(buf)]

    @staticmethod
    def _pane_command(rc: str, facts: HostFacts) -> tuple[str, ...]:
        """Run by tmux itself, not through ``default-shell -c``: that ``bash -c``, started under an
        ssh session's environment, reads ~/.bashrc as sshd's commands do, so a start-up file that
        reads standard input there (``read x``) read the pane's terminal and held the shell. Where
        the host has a ``python3`` that can (``HostFacts.python``), bash runs as a child subreaper,
        as on the local host (``process.adopt``: what its processes orphan stays below it, so the
        sweep finds it by ancestry); ``sh`` (never bash: ``sh -c`` reads no start-up file) passes
        the launcher the pane's ``LC_CTYPE``. Elsewhere bash runs as it is, as it does where that
        ``python3`` went away since the connection's probe (rather than a pane that never starts)."""
        bash = ("bash", "--rcfile", rc, "-i")
        if not (facts.python and facts.proc):
            return bash
        plain = " ".join(sh_quote(word) for word in bash)
        launcher = adopting_command(bash, unset=(OWN_PROCESS,), python=facts.python)
        return ("sh", "-c", f"[ -x {sh_quote(facts.python)} ] || exec {plain}; {launcher}")

    async def create(self, shell_id: str, *, cwd: str, cols: int, rows: int, start: ShellStart) -> None:
        facts = await self.connection()
        log, rc = facts.log(shell_id), facts.rc(shell_id)
        fresh = await self.sh.run(f"umask 077; : > {sh_quote(log)}")
        if fresh.status != 0:
            raise HostUnsuitable(f"{self.conn.where}: cannot create {log}; check the state directory there")
        cmds = [*self._configure(), *self._put_file(rc, start.rc_text)]
        # The mirror already starts with what the log must start with (a revived shell's scrollback).
        head = read_range(self.log_of(shell_id), 0)
        if head:
            cmds += self._put_file(log, head.decode("utf-8", "surrogateescape"))
        cmds += [
            commands.new_session(
                shell_id, cols=cols, rows=rows, cwd=cwd, env=start.env, command=self._pane_command(rc, facts)
            ),
            commands.pipe_pane(commands.session(shell_id), log),
        ]
        try:
            # Never twice: tmux may have made the shell before the answer was lost.
            await self._run_many(cmds, resend=False)
        except HostError as exc:
            # The request may have reached tmux: the shell may exist there (a new error: the one
            # raised may be the host's cached one).
            err = type(exc)(exc.message)
            err.shell = shell_id
            raise err from exc
        self._synced[shell_id] = self._generation
        self._follow(shell_id)

    async def respawn(self, pane: PaneInfo, *, cwd: str | None, start: ShellStart) -> Leftovers:
        facts = await self.connection()
        rc, log = facts.rc(pane.shell_id), facts.log(pane.shell_id)
        # What the old shell started ends with it, as at close; found before the new shell
        # exists, since that one carries the same marker, and before the old bash ends, while what
        # it adopted is still below it.
        old = await self.sweeper.collect(pane.shell_id, _root(pane)) if facts.proc else ()
        await self._run_many(
            [
                *self._configure(),
                *self._put_file(rc, start.rc_text),
                commands.stop_pipe(pane.pane_id),
                commands.respawn_pane(pane.pane_id, cwd=cwd, command=self._pane_command(rc, facts)),
                commands.pipe_pane(pane.pane_id, log),
            ]
        )
        self.forget(pane.shell_id)
        return await self.sweeper.sweep(pane.shell_id, old, everywhere=False) if old else Leftovers()

    async def kill(self, shell_id: str) -> Leftovers:
        facts, pane = self.conn.facts, self._panes.get(shell_id)
        # Before tmux ends the pane: once its bash is gone, what it adopted is PID 1's, and only the
        # marker would find it (not a process that cleared its environment).
        known = await self.sweeper.collect(shell_id, _root(pane)) if facts is not None and facts.proc else ()
        left = Leftovers()
        ended = False
        try:
            with contextlib.suppress(SessionError):  # gone already: what it started goes too
                await super().kill(shell_id)
            ended = True
        finally:
            self._followed.discard(shell_id)
            await self.mirror.stop(shell_id)
            facts = self.conn.facts
            if facts is not None:
                if ended and facts.proc:
                    left = await self.sweeper.sweep(shell_id, known)
                # Nothing of a closed shell stays on the host (its mirror keeps the output here).
                await self._quiet(f"rm -f {sh_quote(facts.log(shell_id))} {sh_quote(facts.rc(shell_id))}")
            elif ended:
                lost = f"the connection to host {self.name} was lost before they were ended"
                left = Leftovers(unknown=lost)
                logger.warning("host %s: closing %s: %s", self.name, shell_id, left.unknown)
        return left

    async def write_rc(self, shell_id: str, text: str) -> str:
        facts = await self.connection()
        await self._run_many(self._put_file(facts.rc(shell_id), text))
        return facts.rc(shell_id)

    # ---- people ----------------------------------------------------------------------------------

    def attach_argv(self, shell_id: str) -> list[str]:
        """A person's terminal on the shell: ``ssh -tt`` (a terminal on the host) running
        ``tmux attach`` there, through the shared connection."""
        script = f"h={home_expression(self.section.tether_home)}; exec " + _words(
            commands.client_argv(Path(_SOCKET_WORD), commands.attach(shell_id))
        )
        return self.conn.argv(remote_command(script), tty=True)


def _root(pane: PaneInfo | None) -> int | None:
    """The pane's bash, while it runs (a dead pane's pid may be another process's by now)."""
    return pane.pid if pane is not None and not pane.dead and pane.pid > 0 else None


def remote_hosts(config: Config) -> dict[str, ShellHost]:
    """One ``SshHost`` per ``[hosts.NAME]`` entry."""
    return {section.name: SshHost(config, section) for section in config.hosts}
