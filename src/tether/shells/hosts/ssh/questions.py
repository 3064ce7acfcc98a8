"""What a remote host is asked about its files, terminals and processes: one ``sh`` question each.

Invariant: every answer comes from the host's own command shell (``sh``) in one round trip
(no fork there where it can be avoided: the process facts walk ``/proc`` with shell builtins);
the answers a wait poll asks for together (the foreground and its CPU time) share one question
(``_PROCS_FRESH_S``). ``sync_log`` proves the mirror caught up the way the local host proves its
log did: a mark written to the pane's terminal there arrives after everything printed before it.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod

from tether.shells.host import Foreground
from tether.shells.hosts.ssh.conn import HostError, HostFacts
from tether.shells.hosts.ssh.procs import PaneProcs, facts_script, parse_facts
from tether.shells.hosts.ssh.sh import RemoteShell
from tether.shells.tmux import commands
from tether.shells.tmux.commands import PaneInfo, sh_quote
from tether.shells.tmux.control import ControlClient
from tether.shells.wakeups import LogWatcher

_PROCS_FRESH_S = 0.01  # one process listing serves the questions of one wait poll
_RESIZE_WAIT_S = 2.0


class RemoteQuestions:
    """The questions part of ``SshHost`` (which provides the channels and the connection)."""

    sh: RemoteShell
    control: ControlClient
    watcher: LogWatcher
    _procs: dict[tuple[str, bool], tuple[float, asyncio.Task[PaneProcs]]]

    @abstractmethod
    async def connection(self, *, force: bool = False) -> HostFacts: ...

    # ---- the host's files ----------------------------------------------------------------------

    @staticmethod
    def _expand(path: str) -> str:
        """``p`` set to ``path`` with a leading ``~`` expanded, as a shell statement."""
        return f'p={sh_quote(path)}; case $p in "~") p=$HOME;; "~/"*) p=$HOME/${{p#"~/"}};; esac; '

    async def start_dir(self, cwd: str | None) -> str | None:
        script = (self._expand(cwd) + 'cd -- "$p" && pwd') if cwd else "cd && pwd"
        reply = await self.sh.run(script)
        out = reply.out.strip()
        return out if reply.status == 0 and out.startswith("/") else None

    async def exists(self, path: str, pane: PaneInfo | None = None) -> bool:
        return (await self.sh.run(self._expand(path) + '[ -e "$p" ]')).status == 0

    async def git_branch(self, cwd: str) -> str | None:
        try:
            reply = await self.sh.run(f"git -C {sh_quote(cwd)} rev-parse --abbrev-ref HEAD")
        except HostError:
            return None
        return (reply.out.strip() or None) if reply.status == 0 else None

    # ---- the terminal ----------------------------------------------------------------------------

    async def pty_size(self, pane: PaneInfo) -> tuple[int, int] | None:
        reply = await self.sh.run(f"stty size < {sh_quote(pane.tty)}")
        parts = reply.out.split()
        if reply.status != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        return int(parts[1]), int(parts[0])

    async def resize(self, pane: PaneInfo, cols: int, rows: int) -> None:
        """``resize-window``, then until the host's terminal has the size (tmux applies it on its
        next loop turn); each look is one question to the host."""
        await self.control.run(*commands.resize_window(pane.shell_id, cols, rows))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _RESIZE_WAIT_S
        while await self.pty_size(pane) not in ((cols, rows), None) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    # ---- processes ---------------------------------------------------------------------------------

    async def _pane_procs(self, pane: PaneInfo, *, terminal: bool = False) -> PaneProcs:
        """The pane's processes (and, with ``terminal``, its terminal's mode); callers that ask
        within ``_PROCS_FRESH_S`` of each other share one question. A question asked earlier than
        that is never shared, even while it is still in flight: its answer may predate what the
        caller already knows (a wait that saw a program start, then ``shell_state``)."""
        loop = asyncio.get_running_loop()
        key = (pane.shell_id, terminal)
        found = self._procs.get(key)
        if found is not None and loop.time() - found[0] < _PROCS_FRESH_S:
            return await asyncio.shield(found[1])
        task = loop.create_task(self._ask_procs(pane, terminal))
        # Its asker may have gone (a wait whose time ran out): the error is nobody's to report.
        task.add_done_callback(_retrieve)
        self._procs[key] = (loop.time(), task)
        return await asyncio.shield(task)

    async def _ask_procs(self, pane: PaneInfo, terminal: bool) -> PaneProcs:
        facts = await self.connection()
        reply = await self.sh.run(facts_script(pane.pid, pane.tty, terminal=terminal), isolated=False)
        return parse_facts(reply.out, facts.clock_ticks)

    async def foreground(self, pane: PaneInfo) -> Foreground:
        pgid, in_front, command = (await self._pane_procs(pane)).foreground(pane.pid)
        return Foreground(pgid=pgid, shell_in_front=in_front, command=command)

    async def front_busy(self, pane: PaneInfo) -> bool:
        return (await self._pane_procs(pane)).front_busy(pane.pid)

    async def starting(self, pane: PaneInfo) -> bool:
        return (await self._pane_procs(pane)).starting(pane.pid)

    async def tree_names(self, pane: PaneInfo) -> list[str]:
        return (await self._pane_procs(pane)).tree_names(pane.pid)

    async def group_names(self, pane: PaneInfo, pgid: int) -> list[str]:
        return (await self._pane_procs(pane)).group_names(pane.pid, pgid)

    async def group_cpu_seconds(self, pane: PaneInfo, pgid: int) -> float:
        return (await self._pane_procs(pane)).group_cpu(pane.pid, pgid)

    async def reading_line(self, pane: PaneInfo) -> bool | None:
        procs = await self._pane_procs(pane, terminal=True)
        _, in_front, _ = procs.foreground(pane.pid)
        if not in_front:
            return False
        return None if procs.canonical is None else not procs.canonical

    async def line_mode(self, pane: PaneInfo) -> bool | None:
        return (await self._pane_procs(pane, terminal=True)).canonical

    def read_state(self, shell_id: str, *, report: bool = False) -> bytes | None:
        """Not carried over the connection: the guard judges a remote shell's lines without its
        earlier definitions (``accept.capable`` is False), as docs/hosts.md says."""
        return None

    async def print_on_terminal(self, pane: PaneInfo, data: bytes) -> bool:
        # Every byte as a printf octal escape: nothing in ``data`` is read by the remote shell.
        escaped = "".join(f"\\{byte:03o}" for byte in data)
        try:
            reply = await self.sh.run(f"printf '{escaped}' > {sh_quote(pane.tty)}")
        except HostError:
            return False
        return reply.status == 0


def _retrieve(task: asyncio.Task[PaneProcs]) -> None:
    if not task.cancelled():
        task.exception()
