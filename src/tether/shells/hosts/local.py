"""The local host: tmux on this machine, ``$TETHER_HOME/tmux.sock``, logs under ``$TETHER_HOME/logs``.

Invariant: the tmux server is started by this process's control client with the credential-scrubbed
environment, so no shell inherits a secret of the server; each shell's start-up file lives in
``$TETHER_HOME/rc`` (0700 directory, 0600 file) and the pane runs ``bash --rcfile`` on it, as a
child subreaper (``process.adopt``: what it starts stays below it, so ending the shell ends all of
it) — or, for a confined shell, the pane runs bubblewrap around that bash, whose PID namespace does
that (``confined``: its start-up file and state under ``$TETHER_HOME/sandbox/shells``). Process
facts come from ``/proc`` and the pane's terminal (``procinfo``), starting from the shell itself
(inside the sandbox for a confined one): microsecond reads, no tmux call.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import struct
import termios
from pathlib import Path

import anyio

from tether.config import Config, ensure_home
from tether.errors import TetherError
from tether.home import current_directory, replace_file
from tether.process.adopt import OWN_PROCESS, adopting_command
from tether.process.container import read_proc
from tether.process.env import scrub_environment
from tether.process.planted import read_regular
from tether.process.strays import Strays
from tether.process.tree import alive
from tether.shell import ShellSandboxInfo
from tether.shells.host import Foreground, Leftovers, ShellHost, ShellStart
from tether.shells.hosts import procinfo
from tether.shells.hosts.confined import ConfinedPanes, Confinement
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo
from tether.shells.tmux.control import ClientEnded, ControlClient, SessionError
from tether.shells.wakeups import LogWatcher

logger = logging.getLogger(__name__)

_RESIZE_WAIT_S = 2.0
# A dump over this is not the integration's (a shell's definitions are far smaller).
_MAX_STATE_BYTES = 16 << 20


# A process's own identity is not every shell's: the tmux server outlives the process that started it
# (and is no shell's, even started from inside one: a shell's processes end with it, found by
# ``TETHER_SHELL``).
_NOT_INHERITED = frozenset({"TETHER_CONVERSATION", "TETHER_SESSION_ID", "TETHER_SHELL", "TMUX", "TMUX_PANE"})


def server_environment(config: Config) -> dict[str, str]:
    """What the tmux server (and so every shell) starts with: credentials scrubbed, nothing that
    names the process or conversation that happened to start it, and ``TETHER_HOME`` the home the
    server belongs to — which that process's own environment may not say (unset for the default
    ``~/.tether``, or another home than a program's ``tether.Tether(home=…)``), and which every
    process of a shell carries as a marker its close looks for."""
    env = scrub_environment(os.environ, config.env)
    shell_env = {k: v for k, v in env.items() if k not in _NOT_INHERITED}
    shell_env["TETHER_HOME"] = str(config.home)
    return shell_env


async def sessions_running(config: Config) -> set[str] | None:
    """The sessions of this machine's tmux server for ``config.home``, asked with a plain client,
    which starts no server: empty when none runs, ``None`` when tmux could not tell (for a process
    with no open shell, which must not start one: retention's sweep)."""
    socket = config.home / "tmux.sock"
    if not socket.exists():
        return set()
    try:
        child = await asyncio.create_subprocess_exec(
            *commands.client_argv(socket, commands.list_session_names()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=server_environment(config),
        )
        out, err = await child.communicate()
    except OSError:
        return None
    if child.returncode == 0:
        return set(out.decode("utf-8", "replace").split())
    return set() if b"no server running" in err or not socket.exists() else None


class LocalHost(ShellHost):
    """Shells in tmux on this machine. ``shell`` is the bash executable panes run."""

    def __init__(self, config: Config, *, name: str = "local") -> None:
        super().__init__()
        self.name = name
        self.config = config
        self.home = ensure_home(config.home)
        self.socket = self.home / "tmux.sock"
        self.logs_dir = self.home / "logs"
        self.rc_dir = self.home / "rc"
        self.control = ControlClient(
            self.socket, gate=self.home / "tmux.gate", env=server_environment(config)
        )
        self.watcher = LogWatcher(self.logs_dir, cap=config.sessions.log_max_bytes)
        self.shell = config.sessions.shell or "bash"
        self.confined = ConfinedPanes(self.home)
        self._configured = False

    def start(self) -> None:
        self.watcher.start()

    # ---- creating shells ------------------------------------------------------------------------

    def check_start(self, start: ShellStart) -> None:
        return None  # bubblewrap confines shells here

    def pane_command(self, shell_id: str, start: ShellStart, cwd: str) -> str:
        """What tmux runs in the pane: bash on the shell's own start-up file (confined: inside
        bubblewrap, the sandbox's writable root being ``cwd``)."""
        confinement = start.confinement
        if confinement is not None and confinement.sandboxed:
            return self.confined.command(
                shell_id,
                shell=self.shell,
                cwd=cwd,
                rc_text=start.rc_text,
                nonce=start.nonce,
                confinement=confinement,
            )
        rc = self._write_rc(shell_id, start.rc_text)
        # bash adopts what its processes orphan: ending the shell ends everything it started.
        return adopting_command([self.shell, "--rcfile", str(rc), "-i"], unset=(OWN_PROCESS,))

    async def write_rc(self, shell_id: str, text: str) -> str:
        return self._write_rc(shell_id, text)

    def _write_rc(self, shell_id: str, text: str) -> str:
        if self.confined.is_confined(shell_id):
            return self.confined.write_rc(shell_id, text)
        self.rc_dir.mkdir(mode=0o700, exist_ok=True)
        path = self.rc_dir / f"{shell_id}.bash"
        replace_file(path, text.encode("utf-8"))
        # The shell rewrites these at every prompt (``>|`` keeps an existing file's mode): they hold
        # its variables, so they exist, private, before it first writes them.
        for state in self._state_files(shell_id):
            os.close(os.open(state, os.O_WRONLY | os.O_CREAT, 0o600))
        return str(path)

    async def start_dir(self, cwd: str | None) -> str | None:
        fix = "give open.cwd an absolute directory, or set [shell].cwd in config.toml"
        return _directory(cwd or self.config.shell.cwd or current_directory(fix))

    async def exists(self, path: str, pane: PaneInfo | None = None) -> bool:
        if pane is not None and self.confined.is_confined(pane.shell_id):
            # The shell's view (private /tmp, hidden TETHER_HOME), never the host's: an oracle else.
            return self.confined.exists(pane.shell_id, pane.pid, path)
        return _exists(path)

    async def git_branch(self, cwd: str) -> str | None:
        try:
            proc = await asyncio.create_subprocess_exec(
                "git",
                "-C",
                cwd,
                "rev-parse",
                "--abbrev-ref",
                "HEAD",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError:
            return None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 5.0)
        except TimeoutError:  # a git stuck on a lock or a slow disk ends with the question
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return None
        return out.decode().strip() or None if proc.returncode == 0 else None

    def rc_path(self, shell_id: str) -> Path:
        return self.rc_dir / f"{shell_id}.bash"

    def _state_files(self, shell_id: str) -> tuple[Path, Path]:
        if self.confined.is_confined(shell_id):
            return self.confined.state_files(shell_id)
        return self.rc_dir / f"{shell_id}.state", self.rc_dir / f"{shell_id}.report"

    def read_state(self, shell_id: str, *, report: bool = False) -> bytes | None:
        # A confined shell writes these itself and may leave anything there (``read_regular``).
        data = read_regular(self._state_files(shell_id)[1 if report else 0], _MAX_STATE_BYTES)
        return data if data and len(data) <= _MAX_STATE_BYTES else None

    async def _configure(self) -> list[commands.Cmd]:
        if self._configured:
            return []
        self._configured = True
        return commands.server_options()

    async def _check_confinement(self, start: ShellStart, cwd: str) -> None:
        if start.confinement is not None and start.confinement.sandboxed:
            await self.confined.ensure_usable(cwd, start.confinement)

    async def create(self, shell_id: str, *, cwd: str, cols: int, rows: int, start: ShellStart) -> None:
        await self._check_confinement(start, cwd)
        log = self.log_of(shell_id)
        command = self.pane_command(shell_id, start, cwd)
        # One write: tmux runs these before its event loop reads the new pane, so the log gets the
        # shell's very first byte, and the server options hold before the shell can end.
        try:
            await self.control.run_many(
                [
                    *await self._configure(),
                    commands.new_session(
                        shell_id, cols=cols, rows=rows, cwd=cwd, env=start.env, command=command
                    ),
                    commands.pipe_pane(commands.session(shell_id), str(log)),
                ],
                resend=False,  # run twice, the second would find the first's: "duplicate session"
            )
        except ClientEnded:
            # tmux may have made the session before the client ended: the caller drops the shell's
            # record, so a session left here would run with nobody to see or close it.
            with contextlib.suppress(SessionError):
                await self.control.run(*commands.kill_session(shell_id))
            raise
        await self._started(shell_id, start)

    async def _started(self, shell_id: str, start: ShellStart) -> None:
        if start.confinement is not None and start.confinement.sandboxed:
            self.confined.started(shell_id, (await self.pane_now(shell_id)).pid)

    async def respawn(self, pane: PaneInfo, *, cwd: str | None, start: ShellStart) -> Leftovers:
        await self._check_confinement(start, cwd or pane.cwd)
        command = self.pane_command(pane.shell_id, start, cwd or pane.cwd)
        log = str(self.log_of(pane.shell_id))
        # What the old shell started ends with it, as at close; found before the new shell
        # exists, since that one carries the same marker.
        strays = Strays()
        await asyncio.to_thread(strays.find, roots=_roots(pane), markers=self._markers(pane.shell_id, pane))
        # The old pipe ends with the old process, but only later: close it first and open a fresh
        # one in the same batch, so tmux pipes the new shell's first byte into the log.
        try:
            await self.control.run_many(
                [
                    *await self._configure(),
                    commands.stop_pipe(pane.pane_id),
                    commands.respawn_pane(pane.pane_id, cwd=cwd, command=command),
                    commands.pipe_pane(pane.pane_id, log),
                ]
            )
        except BaseException:
            strays.release()
            raise
        self.forget(pane.shell_id)
        left = Leftovers(
            processes=await strays.end(self.config.shell.grace_ms / 1000, rescan=lambda found: found.find())
        )
        if left:
            logger.warning("respawning %s: %s", pane.shell_id, left.text())
        await self._started(pane.shell_id, start)
        return left

    async def kill(self, shell_id: str) -> Leftovers:
        """End the shell's session and every process it started: tmux's SIGHUP reaches only the
        session, so ``setsid``, ``nohup`` and disowned processes are found by their inherited
        marker (``strays``), and end with it (SIGTERM; SIGKILL after ``[shell].grace_ms``). A
        session gone already is no failure (closing is idempotent): what it started ends all the
        same. Returns what was still running after all that (logged too: an idle reclaim has
        nobody to tell)."""
        pane = self._panes.get(shell_id)
        markers = self._markers(shell_id, pane)
        strays = Strays()
        # Before tmux ends the pane: its descendants are found by ancestry too, marker or not.
        await asyncio.to_thread(strays.find, roots=_roots(pane), markers=markers)
        try:
            await super().kill(shell_id)
        except ClientEnded:
            strays.release()  # tmux did not answer: the shell may still be there
            raise
        except SessionError:
            pass  # the session was gone already: its processes go all the same
        except BaseException:
            strays.release()
            raise
        try:
            left = await self._end(strays, markers)
        finally:
            # The session is gone: its files and its confinement go with it, also when the call
            # was cancelled meanwhile (the processes were ended all the same, see ``Strays.end``).
            with anyio.CancelScope(shield=True):
                self.rc_path(shell_id).unlink(missing_ok=True)
                for state in self._state_files(shell_id):
                    state.unlink(missing_ok=True)
                await self.confined.ended(shell_id, pane.pid if pane is not None else None)
        if left:
            logger.warning("closing %s: %s", shell_id, left.text())
        return left

    def _markers(self, shell_id: str, pane: PaneInfo | None) -> tuple[str, ...]:
        """What every process of the shell inherits: its id and its home, as its pane got them."""
        home = str(self.home)
        if pane is not None and not pane.dead:  # a dead pane's pid may be another process's now
            with contextlib.suppress(OSError):
                for entry in read_proc(f"/proc/{pane.pid}/environ").split(b"\0"):
                    if entry.startswith(b"TETHER_HOME="):
                        home = os.fsdecode(entry[len(b"TETHER_HOME=") :])
        return (f"TETHER_SHELL={shell_id}", f"TETHER_HOME={home}")  # see lifecycle.start_of

    async def _end(self, strays: Strays, markers: tuple[str, ...]) -> Leftovers:
        def rescan(found: Strays) -> None:
            found.find(markers=markers)

        return Leftovers(processes=await strays.end(self.config.shell.grace_ms / 1000, rescan=rescan))

    # ---- confinement --------------------------------------------------------------------------------

    async def sandbox_report(
        self,
        pane: PaneInfo,
        confinement: Confinement,
        *,
        cwd: str,
        token: int,
        ended: bool,
        output: str,
    ) -> ShellSandboxInfo | None:
        if not confinement.sandboxed:
            return None
        return await self.confined.report(
            pane.shell_id, cwd, confinement, token=token, ended=ended, output=output
        )

    async def check_confined(self, shell_id: str, cwd: str, confinement: Confinement) -> None:
        if confinement.sandboxed and self.confined.is_confined(shell_id):
            await self.confined.check(shell_id, cwd, confinement)

    def sandbox_summary(self, shell_id: str, cwd: str, confinement: Confinement) -> str | None:
        if not (confinement.sandboxed and self.confined.is_confined(shell_id)):
            return None
        try:
            confined = self.confined.attach(shell_id, cwd, confinement)
        except TetherError:  # its directory is gone now, say: the caller still has the mode
            return None
        summary = confined.policy.summary()
        if confinement.granted_by:
            summary += f" (granted by {confinement.granted_by})"
        return f"{summary}; {confined.bounds_text}"

    async def pty_size(self, pane: PaneInfo) -> tuple[int, int] | None:
        try:
            fd = os.open(pane.tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        except OSError:
            return None
        finally:
            os.close(fd)
        return cols, rows

    async def resize(self, pane: PaneInfo, cols: int, rows: int) -> None:
        """Resize the window and return once the terminal has the new size: tmux applies a size to
        the pty (``TIOCSWINSZ``, which signals the programs) on its next loop turn, not when the
        command returns. ``resize-window`` also pins ``window-size manual``."""
        await self.control.run(*commands.resize_window(pane.shell_id, cols, rows))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _RESIZE_WAIT_S
        step = 0.001
        while await self.pty_size(pane) not in ((cols, rows), None) and loop.time() < deadline:
            await asyncio.sleep(step)
            step = min(step * 2, 0.02)

    # ---- processes --------------------------------------------------------------------------------

    async def alive(self, pane: PaneInfo) -> bool:
        return alive(pane.pid)

    def _shell(self, pane: PaneInfo) -> int:
        """The pid of the pane's shell (inside bubblewrap, for a confined shell)."""
        return self.confined.shell_pid(pane.shell_id, pane.pid)

    async def foreground(self, pane: PaneInfo) -> Foreground:
        fg = procinfo.foreground(self._shell(pane))
        return Foreground(pgid=fg.pgid, shell_in_front=fg.shell_in_front, command=fg.command)

    async def front_busy(self, pane: PaneInfo) -> bool:
        return procinfo.foreground_busy(self._shell(pane))

    async def starting(self, pane: PaneInfo) -> bool:
        return procinfo.shell_starting(self._shell(pane))

    async def tree_names(self, pane: PaneInfo) -> list[str]:
        return procinfo.tree_names(self._shell(pane))

    async def group_names(self, pane: PaneInfo, pgid: int) -> list[str]:
        return procinfo.group_names(self._shell(pane), pgid)

    async def group_cpu_seconds(self, pane: PaneInfo, pgid: int) -> float:
        return procinfo.group_cpu_seconds(self._shell(pane), pgid)

    async def line_mode(self, pane: PaneInfo) -> bool | None:
        return procinfo.terminal_canonical(pane.tty)

    async def print_on_terminal(self, pane: PaneInfo, data: bytes) -> bool:
        try:
            fd = os.open(pane.tty, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            os.write(fd, data)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    async def reading_line(self, pane: PaneInfo) -> bool | None:
        fg = procinfo.foreground(self._shell(pane))
        if not fg.shell_in_front:
            return False
        canonical = procinfo.terminal_canonical(pane.tty)
        if canonical is None:
            return None
        return not canonical and procinfo.terminal_input_queued(pane.tty) == 0

    async def sessions_running(self) -> set[str] | None:
        """This home's sessions on this machine, asking nothing that starts a server (see
        ``sessions_running``)."""
        return await sessions_running(self.config)

    # ---- people -----------------------------------------------------------------------------------

    def attach_argv(self, shell_id: str) -> list[str]:
        return commands.client_argv(self.socket, commands.attach(shell_id))


def _roots(pane: PaneInfo | None) -> tuple[int, ...]:
    """Where a shell's tree is looked for by ancestry: its bash, while it runs. A dead pane's pid
    was reaped by tmux and may already be another process's, whose children are not the shell's
    (what the dead bash left is found by its marker)."""
    return (pane.pid,) if pane is not None and not pane.dead else ()


# A stat on this machine costs microseconds: no thread for it. ``os.path`` answers "no" for a name
# the kernel refuses (too long, a NUL) and leaves ``~nosuchuser`` as it is; pathlib raises for both.
# Absolute and normalised against this process's working directory: the directory is stored in the
# shell's record, and another tether process (started elsewhere) restarts the shell from it — a
# relative one would name a different directory there (for a confined shell, a different root).
def _directory(path: str) -> str | None:
    found = os.path.abspath(os.path.expanduser(path))
    return found if os.path.isdir(found) else None


def _exists(path: str) -> bool:
    return os.path.exists(os.path.expanduser(path))
