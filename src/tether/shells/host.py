"""The shell-host seam: one machine's tmux server and everything tether needs to know of it.

Invariant: nothing above this seam assumes a shell runs on this machine. A host owns its tmux
control client, the log files of its shells (on a remote host, the local mirror of the logs kept
there), the inotify watcher that wakes waits, and the process facts a wait needs (the terminal's
foreground, the pane's process tree, CPU time, whether the terminal reads a line). Operations
(``open``, ``run``, ``read`` …) take a host and never reach past these methods.

A host is built once per process and ``TETHER_HOME`` and started on the event loop that uses it;
``close`` ends its control client and watcher (the shells themselves live on in tmux). A host on
another machine may be unreachable: its methods then raise ``HostError`` (``hosts.ssh``), and
a wait that was following it when its connection dropped ends (``check_connection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import NotFoundError, RefusedError
from tether.process.strays import Survivor
from tether.shell import ShellSandboxInfo
from tether.shells.ids import is_shell_id
from tether.shells.integration.events import sync_mark
from tether.shells.logs import log_path, log_size, read_range
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo
from tether.shells.tmux.control import ControlClient, SessionError
from tether.shells.wakeups import LogWatcher

_SYNC_WAIT_S = 10.0  # the mark follows the pane's output by microseconds; this is for a stalled host
# A listing this young is "now" for the person check: a person's keystroke window is seconds long,
# and the listing was asked after the call began (so a write costs one query round trip, not two).
_FRESH_S = 0.02

# A pane listing as asked: (monotonic time of asking, its lines, the clients' keystroke times).
_Listing = tuple[float, list[str], dict[str, float]]


async def _early_listing(
    asked: float,
    panes: Sequence[asyncio.Future[list[str]]],
    clients: asyncio.Future[list[str]],
    *,
    each: bool,
) -> _Listing:
    """The answers of a listing written at once: one ``list-panes -a`` (``each`` false), or one
    ``display-message`` per named shell (``each``: a shell tmux cannot find has no line)."""
    found = await asyncio.gather(*panes, clients, return_exceptions=True)
    lines: list[str] = []
    for answer in found[:-1]:
        if isinstance(answer, SessionError) and each:
            continue
        if isinstance(answer, BaseException):
            raise answer
        lines.extend(answer)
    # As in ``client_activity``: clients that cannot be listed type nowhere.
    listed = found[-1]
    return asked, lines, {} if isinstance(listed, BaseException) else commands.parse_clients(listed)


def _key(only: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if only is None else tuple(sorted(set(only)))


def _listing(*, lean: bool, only: tuple[str, ...] | None) -> list[commands.Cmd]:
    """What asks tmux for the panes: every one, or each named shell's."""
    if only is None:
        return [commands.list_panes(lean=lean)]
    # An id of another form cannot be a shell's (tether made it): it has no pane, asked or not.
    return [commands.describe_pane(shell_id, lean=lean) for shell_id in only if is_shell_id(shell_id)]


def _retrieved(task: asyncio.Task[_Listing]) -> None:
    if not task.cancelled():
        task.exception()


if TYPE_CHECKING:  # hosts/ implements this seam: at run time it imports this module, not back
    from tether.shells.hosts import Confinement


@dataclass(frozen=True, slots=True, kw_only=True)
class Foreground:
    """The terminal's foreground process group, and whether it is the shell itself."""

    pgid: int  # 0 = unknown
    shell_in_front: bool
    command: str  # name of the foreground group's leader ("bash" when the shell is in front)


@dataclass(frozen=True, slots=True, kw_only=True)
class Leftovers:
    """What ending a shell could not end: ``processes`` still running after its sweep (past
    ``SIGKILL`` and a bound after it: in uninterruptible sleep, in a frozen cgroup, not ours to
    signal), and ``unknown``, why the host could not be asked to end them at all (a remote host
    gone meanwhile: what the shell started may run on there). Empty: nothing is left."""

    processes: tuple[Survivor, ...] = ()
    unknown: str = ""

    def __bool__(self) -> bool:
        return bool(self.processes or self.unknown)

    def text(self) -> str:
        """One line for a result, a log or an audit record (empty when nothing is left)."""
        parts = []
        if self.processes:
            listed = ", ".join(f"pid {p.pid} ({p.command})" for p in self.processes)
            parts.append(
                f"still running after SIGKILL: {listed} (in uninterruptible sleep, frozen "
                "or not tether's to signal; end them by hand once they can be)"
            )
        if self.unknown:
            parts.append(f"could not end what the shell started: {self.unknown}")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellStart:
    """How a new shell starts: its start-up file, its environment, and its confinement (``None``:
    it runs as the user; a sandboxed one is started inside bubblewrap by a host that can)."""

    rc_text: str  # the integration script (see ``integration.script``)
    nonce: str = ""
    env: tuple[tuple[str, str], ...] = ()
    confinement: Confinement | None = None


class ShellHost(ABC):
    """One tmux server and its shells. See the module docstring for the invariant."""

    name: str
    control: ControlClient
    watcher: LogWatcher
    logs_dir: Path

    def __init__(self) -> None:
        self._panes: dict[str, PaneInfo] = {}
        # Each line of the last listing and the pane parsed from it: an unchanged line is not
        # parsed again (most shells are idle, and every call lists them all).
        self._lines: dict[str, PaneInfo] = {}
        # The last listing read with the clients' keystroke times: (monotonic time, panes, clients).
        self._seen: tuple[float, dict[str, PaneInfo], dict[str, float]] | None = None
        # The listing ``expect_listing`` asked for a call on its way: (monotonic time, the shells
        # it names or ``None`` for all, its answer).
        self._early: tuple[float, tuple[str, ...] | None, asyncio.Task[_Listing]] | None = None

    # ---- lifecycle of the host ------------------------------------------------------------------

    @abstractmethod
    def start(self) -> None:
        """Begin watching logs (on the running event loop)."""

    async def close(self) -> None:
        self.watcher.close()
        await self.control.close()

    async def connect(self) -> None:
        """Reach the host now (a remote host tries again even after a recent failure); raises the
        host's error when it cannot be reached. This machine is always reachable."""
        return

    def connection_mark(self) -> int:
        """A number that changes whenever the host's connection drops (0: it never does)."""
        return 0

    def check_connection(self, mark: int) -> None:
        """Raise (``ConnectionLost``) if the connection dropped since ``mark`` was taken: a wait
        following the host's output cannot know what it missed."""
        return

    def lost_in_wait(self, exc: Exception) -> Exception:
        """What a wait following one of this host's shells raises for ``exc``, which a host call
        raised while it waited (here: ``exc`` itself; a remote host: its one connection-lost error,
        whatever the call that found the connection gone saw)."""
        return exc

    # ---- panes ----------------------------------------------------------------------------------

    def log_of(self, shell_id: str) -> Path:
        return log_path(self.logs_dir, shell_id)

    async def panes(self, *, lean: bool = False, only: Sequence[str] | None = None) -> dict[str, PaneInfo]:
        """Every ``dsh-`` shell's pane (one each, a dead one too), fresh from tmux (asked after
        this call began; the concurrent callers of one loop iteration share the query).

        ``lean``: without the foreground's cwd and name, which cost tmux a read of ``/proc`` per
        pane; each pane keeps the ones last read for it (``""`` if none was). For a caller that
        needs which shells live and their state, not where they are. A lean caller takes the
        listing ``expect_listing`` asked, once, if it is at most ``_FRESH_S`` old and names the
        same shells.

        ``only``: just these shells (those tmux has), each asked by name: what a call that names
        its shells needs, at a cost that does not grow with the number of shells on the host
        (``list-panes -a`` formats a line for every pane)."""
        key = _key(only)
        early = self._take_early(key) if lean else None
        try:
            asked, lines, clients = await (early if early is not None else self._ask(lean=lean, only=key))
        except SessionError:
            return {}
        known, before = self._panes, self._lines
        parsed: dict[str, PaneInfo] = {}
        for line in lines:
            pane = before.get(line)
            # Reused only while it is still the pane known for its shell: a lean line takes the
            # known pane's cwd, which ``pane_now`` may have read afresh since.
            if pane is None or known.get(pane.shell_id) is not pane:
                pane = commands.parse_pane(line, known)
            if pane is not None and (key is None or pane.shell_id in key):
                parsed[line] = pane
        panes = {p.shell_id: p for p in parsed.values()}
        for shell_id in panes.keys() - known.keys():
            # First listed by this process: what it printed while nobody watched gets this time.
            self.watcher.clock.note(shell_id)
        if key is None:
            self._lines = parsed
            self._panes = panes
        else:  # the other shells' panes stay as last seen
            for shell_id in key:
                if shell_id in panes:
                    self._panes[shell_id] = panes[shell_id]
                else:
                    self._panes.pop(shell_id, None)
            self._lines.update(parsed)
            if len(self._lines) > 2 * len(self._panes) + 64:
                # Lines of panes that changed since, dropped now and then rather than at every call
                # (that would cost every call a pass over every shell's line).
                self._lines = {line: p for line, p in self._lines.items() if self._panes.get(p.shell_id) is p}
        self._seen = (asked, panes, clients)
        return panes

    def expect_listing(self, only: Sequence[str] | None = None) -> None:
        """A call that begins with a lean listing has arrived (``ToolRegistry.expect``): ask tmux
        now, in one write before this returns, so that the answer comes back while the call is
        still being read and parsed. Nothing is asked while the control client is not up.
        ``only``: the shells the call names (see ``panes``)."""
        now = time.monotonic()
        key = _key(only)
        if self._early is not None and now - self._early[0] < _FRESH_S and self._early[1] == key:
            return  # one asked moments ago waits for its call
        asked = self.control.query_now([*_listing(lean=True, only=key), commands.list_clients()])
        if asked is None:
            return
        task = asyncio.ensure_future(_early_listing(now, asked[:-1], asked[-1], each=key is not None))
        task.add_done_callback(_retrieved)  # a listing no call took fails quietly
        self._early = (now, key, task)

    def _take_early(self, key: tuple[str, ...] | None) -> asyncio.Task[_Listing] | None:
        early, self._early = self._early, None
        if early is None or time.monotonic() - early[0] >= _FRESH_S or early[1] != key:
            return None
        return early[2]

    async def _ask(self, *, lean: bool, only: tuple[str, ...] | None = None) -> _Listing:
        asked = time.monotonic()
        # All leave in one write (the control client batches one loop iteration).
        listing = [self._one(cmd, each=only is not None) for cmd in _listing(lean=lean, only=only)]
        *answers, clients = await asyncio.gather(*listing, self.client_activity())
        assert isinstance(clients, dict)
        return asked, [line for lines in answers if isinstance(lines, list) for line in lines], clients

    async def _one(self, cmd: commands.Cmd, *, each: bool) -> list[str]:
        """One listing command's lines; with ``each``, a shell tmux cannot find has none."""
        try:
            return await self.control.run_shared(*cmd)
        except SessionError:
            if not each:
                raise
            return []

    async def client_activity(self) -> dict[str, float]:
        """Latest keystroke time (epoch s) per session among attached non-control clients, now."""
        try:
            return commands.parse_clients(await self.control.run_shared(*commands.list_clients()))
        except Exception:  # no server, or a host that went away: nobody types there
            return {}

    async def person_view(self, shell_id: str, *, recent: bool = True) -> tuple[PaneInfo, float]:
        """The shell's pane (with the panel's input stamp) and its clients' latest keystroke,
        read now: with ``recent``, from a listing asked within the last few milliseconds (the
        target check of the same call), else from tmux (both queries in one write)."""
        seen = self._seen
        if recent and seen is not None and time.monotonic() - seen[0] < _FRESH_S and shell_id in seen[1]:
            return seen[1][shell_id], seen[2].get(shell_id, 0.0)
        pane, clients = await asyncio.gather(self.pane_now(shell_id), self.client_activity())
        return pane, clients.get(shell_id, 0.0)

    async def pane(self, shell_id: str) -> PaneInfo:
        """The shell's pane, from the last listing if its process still runs, else fresh."""
        cached = self._panes.get(shell_id)
        if cached is not None and not cached.dead and await self.alive(cached):
            return cached
        return await self.pane_now(shell_id)

    async def pane_now(self, shell_id: str) -> PaneInfo:
        """One shell's pane read from tmux now (never the cache); its cost does not grow with the
        number of shells."""
        try:
            lines = await self._tmux_lines(commands.describe_pane(shell_id))
        except SessionError:
            lines = []
        pane = commands.parse_pane(lines[0]) if lines else None
        if pane is None or pane.shell_id != shell_id:
            self._panes.pop(shell_id, None)
            raise NotFoundError(
                f"shell {shell_id} does not exist{self._where()} (it was closed or its process ended); "
                "list live shells with shell_state scope='*'"
            )
        self._panes[shell_id] = pane
        return pane

    async def _tmux_lines(self, command: commands.Cmd) -> list[str]:
        """One tmux command's output lines on this host's server."""
        return await self.control.run_shared(*command)

    def _where(self) -> str:
        """Where this host's shells are, for a message about one of them (here: nothing to say)."""
        return ""

    def forget(self, shell_id: str) -> None:
        self._panes.pop(shell_id, None)

    def release(self, shell_id: str) -> None:
        """The shell was closed (by any process): drop all this process holds for it."""
        self.forget(shell_id)
        self.watcher.forget(shell_id)

    def held(self) -> set[str]:
        """The shells this process holds something of here (``release`` drops it)."""
        return {*self._panes, *self.watcher.held()}

    @abstractmethod
    async def create(self, shell_id: str, *, cwd: str, cols: int, rows: int, start: ShellStart) -> None:
        """Start the shell's tmux session with its log piped from the very first byte."""

    @abstractmethod
    async def respawn(self, pane: PaneInfo, *, cwd: str | None, start: ShellStart) -> Leftovers:
        """Replace the pane's process tree with a fresh shell (same session, same log); what of
        the old shell's processes could not be ended."""

    async def kill(self, shell_id: str) -> Leftovers:
        """End the shell's tmux session (a host also ends what the shell started); what could
        not be ended."""
        self.forget(shell_id)
        await self.control.run(*commands.kill_session(shell_id))
        return Leftovers()

    @abstractmethod
    async def write_rc(self, shell_id: str, text: str) -> str:
        """Store the shell's start-up file on the host; the path its shell reads it from."""

    @abstractmethod
    def read_state(self, shell_id: str, *, report: bool = False) -> bytes | None:
        """What the shell last wrote about its definitions (``integration.script``): at its last
        prompt, or (``report``) when the reporter last ran; ``None`` when it never wrote it."""

    @abstractmethod
    async def start_dir(self, cwd: str | None) -> str | None:
        """The absolute directory on the host a shell starts in (``cwd`` with ``~`` expanded, or
        the host's default when ``None``); ``None`` when it is not a directory there."""

    @abstractmethod
    async def exists(self, path: str, pane: PaneInfo | None = None) -> bool:
        """A path exists on the host (``~`` expanded): the ``file`` wait. ``pane``: the shell that
        waits — a confined one answers as its sandbox sees the path, never as the host does."""

    @abstractmethod
    async def git_branch(self, cwd: str) -> str | None:
        """The git branch checked out in ``cwd`` on the host (``None``: not a repository)."""

    @abstractmethod
    async def resize(self, pane: PaneInfo, cols: int, rows: int) -> None:
        """Resize the window; return once the pane's terminal has the new size."""

    @abstractmethod
    async def pty_size(self, pane: PaneInfo) -> tuple[int, int] | None:
        """(cols, rows) of the pane's terminal as its programs see it (``None``: cannot tell)."""

    # ---- typing ---------------------------------------------------------------------------------

    async def type_keys_then_text(self, pane: PaneInfo, keys: bytes, text: str, *, now: bool = False) -> None:
        """``keys`` (exact bytes) then printable ``text`` as keys, in one write to tmux (``now``:
        written before this first waits, see ``ControlClient.run_many``)."""
        cmds: list[commands.Cmd] = [commands.leave_copy_mode(pane.pane_id)]
        if keys:
            cmds.append(commands.send_bytes(pane.pane_id, keys))
        for i in range(0, len(text), 4096):
            cmds.append(commands.send_literal(pane.pane_id, text[i : i + 4096]))
        await self.control.run_many(cmds, now=now)

    async def type_line(self, pane: PaneInfo, text: str) -> None:
        """Printable ``text`` typed as keys, then Enter (only for tether's own re-install line)."""
        await self.control.run_many(
            [
                commands.leave_copy_mode(pane.pane_id),
                commands.send_literal(pane.pane_id, text),
                commands.send_key_names(pane.pane_id, ("Enter",)),
            ]
        )

    async def type_raw(self, pane: PaneInfo, data: bytes, *, buffer: str) -> None:
        """Exact bytes to whatever reads the terminal, through a paste buffer; the buffer is
        deleted by the paste. Bytes holding a tab are bracketed when the program asked for
        bracketed paste, so a readline program (a nested bash, python's REPL) inserts the tab
        instead of taking it as completion; others arrive as typed keys, since a program may
        take a paste otherwise than keys (vim's normal mode inserts pasted text: ``:q!`` would
        be text, not a command)."""
        if not data:
            return
        await self.control.run_many(
            [
                commands.leave_copy_mode(pane.pane_id),
                commands.set_buffer(buffer, data.decode("utf-8", "surrogateescape")),
                commands.paste_buffer(buffer, pane.pane_id, bracket=b"\t" in data),
            ]
        )

    async def send_keys(self, pane: PaneInfo, keys: Sequence[str]) -> None:
        if keys:
            await self.control.run_many(
                [commands.leave_copy_mode(pane.pane_id), commands.send_key_names(pane.pane_id, keys)]
            )

    async def capture(self, pane: PaneInfo, *, history: int = 0) -> list[str]:
        """The pane as tmux renders it (wrapped lines joined); ``history`` extra scrollback lines."""
        return await self.control.run(*commands.capture(pane.pane_id, history=history))

    # ---- processes --------------------------------------------------------------------------------

    @abstractmethod
    async def alive(self, pane: PaneInfo) -> bool:
        """The pane's process still runs."""

    @abstractmethod
    async def foreground(self, pane: PaneInfo) -> Foreground: ...

    @abstractmethod
    async def front_busy(self, pane: PaneInfo) -> bool:
        """What is in front works (a process of the foreground group runs or waits for the disk),
        or has just ended and the shell has not taken its terminal back (``procinfo.front_busy``)."""

    @abstractmethod
    async def starting(self, pane: PaneInfo) -> bool:
        """The shell is still starting what its running line runs: it works in front itself, or a
        fork of it in front has not yet become the command (``procinfo.starting``)."""

    @abstractmethod
    async def tree_names(self, pane: PaneInfo) -> list[str]:
        """Names of every process under the pane's shell (the shell excluded)."""

    @abstractmethod
    async def group_names(self, pane: PaneInfo, pgid: int) -> list[str]:
        """Names of the processes in process group ``pgid`` under the pane (``git`` and its pager)."""

    @abstractmethod
    async def group_cpu_seconds(self, pane: PaneInfo, pgid: int) -> float: ...

    async def print_on_terminal(self, pane: PaneInfo, data: bytes) -> bool:
        """Write ``data`` to the pane's terminal, as a program in it would print it (``False``:
        this host cannot; the default)."""
        return False

    async def sync_log(self, pane: PaneInfo, *, within: float = _SYNC_WAIT_S) -> bool:
        """Make sure everything the pane printed so far is in the log (``False``: cannot tell, or
        not within ``within`` seconds).

        An invisible mark is printed on the pane's terminal and waited for in the log: tmux pipes a
        pane's output in order (and a remote host's mirror copies it in order), so every byte
        printed before the mark is in the log once the mark is."""
        mark = sync_mark()
        path = self.log_of(pane.shell_id)
        start = log_size(path)
        waker = self.watcher.waker(pane.shell_id)
        try:
            if not await self.print_on_terminal(pane, mark):
                return False
            loop = asyncio.get_running_loop()
            deadline = loop.time() + within
            while mark not in read_range(path, start, None):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                waker.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waker.wait(), min(remaining, 0.5))
            return True
        finally:
            self.watcher.drop(pane.shell_id, waker)

    @abstractmethod
    async def line_mode(self, pane: PaneInfo) -> bool | None:
        """The pane's terminal is in canonical (line) mode: what is typed waits for whoever reads a
        line next — perhaps the shell, after the program in front ends (``None``: cannot tell)."""

    @abstractmethod
    async def reading_line(self, pane: PaneInfo) -> bool | None:
        """The shell in front reads a line in readline's mode with nothing typed pending
        (``None``: cannot tell on this host)."""

    # ---- confinement --------------------------------------------------------------------------------

    def check_start(self, start: ShellStart) -> None:
        """Refuse a start this host cannot honour (a sandboxed shell on a host that cannot confine)."""
        if start.confinement is not None and start.confinement.sandboxed:
            raise refuse_unconfinable(self.name)

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
        """What the sandbox denied during one run of a confined shell (``None``: not confined here)."""
        return None

    async def check_confined(self, shell_id: str, cwd: str, confinement: Confinement) -> None:
        """Neutralise what a confined shell left in git directories outside a run."""
        if confinement.sandboxed:  # a host that cannot confine never started one
            raise refuse_unconfinable(self.name)

    def sandbox_summary(self, shell_id: str, cwd: str, confinement: Confinement) -> str | None:
        """What a confined shell may write and reach, as its sandbox was built (``None``: not
        confined here)."""
        return None

    # ---- people -----------------------------------------------------------------------------------

    @abstractmethod
    def attach_argv(self, shell_id: str) -> list[str]:
        """A real terminal client for one shell (the panel runs it in a PTY)."""


def refuse_unconfinable(host_name: str) -> RefusedError:
    return RefusedError(
        f"host {host_name!r} cannot confine its shells (bubblewrap confines shells on this machine only); "
        "this deployment confines every shell: open the shell on the local host"
    )
