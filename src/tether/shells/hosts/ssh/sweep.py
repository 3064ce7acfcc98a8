"""Ending what a closed remote shell left running on its host, as the local host does.

Invariant: every process a shell starts inherits its ``TETHER_SHELL=<id>`` (tether's own channels
on the host never carry it), so on a Linux host the processes whose environment holds it are the
shell's: background jobs, ``nohup``, ``setsid`` and disowned processes that tmux's hang-up does not
reach. A close ends them all (``SIGTERM`` and ``SIGCONT``, ``SIGKILL`` after the grace) and answers
once they have exited; a respawn ends those found before the new shell (same marker) existed.
Everything runs as scripts on the host's one command shell (``sh``), which answers one question at
a time: shells closed together are swept by one script, so no sweep waits behind another's grace.
Hosts without ``/proc`` or a ``grep`` that takes ``-z`` keep tmux's hang-up alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tether.shells.hosts.ssh.conn import HostError
from tether.shells.hosts.ssh.sh import RemoteShell
from tether.shells.tmux.commands import sh_quote

logger = logging.getLogger(__name__)

_SLACK_S = 20.0  # beyond the grace: SIGKILL, the last look, the round trip


_GREP_Z = "printf 'x\\0' | grep -qzx x 2>/dev/null || exit 2; "
_ALL = "/proc/[0-9]*/environ"

# A shell to sweep: its id, and the only pids to look at (``None``: every process).
Marked = tuple[str, tuple[int, ...] | None]


def _scan(shells: list[Marked]) -> str:
    """``scan``, a function printing (one a line, each once) the pids whose environment holds the
    ``TETHER_SHELL`` of one of ``shells``: among every process this account may read, or among
    that shell's ``pids`` only."""
    greps = []
    everywhere = [shell_id for shell_id, pids in shells if pids is None]
    if everywhere:
        patterns = " ".join("-e " + sh_quote("TETHER_SHELL=" + shell_id) for shell_id in everywhere)
        greps.append(f"grep -lzxF {patterns} {_ALL}")
    for shell_id, pids in shells:
        if pids:
            files = " ".join(f"/proc/{p}/environ" for p in pids)
            greps.append(f"grep -lzxF -e {sh_quote('TETHER_SHELL=' + shell_id)} {files}")
    found = "; ".join(greps) or ":"
    return (
        f"scan() {{ {{ {found}; }} 2>/dev/null "
        "| sed -n 's|^/proc/\\([0-9][0-9]*\\)/environ$|\\1|p' | sort -u; }; "
    )


def marked_script(shell_id: str) -> str:
    """Print the pids of the processes that carry the shell's ``TETHER_SHELL`` (exit 2 where
    ``grep -z`` does not work)."""
    return _GREP_Z + _scan([(shell_id, None)]) + "scan"


def parse_pids(out: str) -> tuple[int, ...]:
    return tuple(int(word) for word in out.split() if word.isdigit())


def sweep_script(shells: list[Marked], grace_s: float) -> str:
    """End what closed shells left running on a Linux host, as the local host does: every process
    whose environment holds one shell's ``TETHER_SHELL`` (its background jobs, ``nohup``,
    ``setsid`` and disowned processes inherit it; tether's own channels there never carry it) gets
    ``SIGTERM`` and ``SIGCONT`` once, found again every tenth of a second (a process forked
    meanwhile is ended too), and ``SIGKILL`` after ``grace_s``. A shell's pids, when given: only
    those (a respawned shell's new processes carry the same marker). One ``grep -z`` reads every
    environment it may (other accounts' processes are unreadable, so never touched). Prints how
    many were ended and how many survived ``SIGKILL``; exits 2 where ``grep -z`` does not work
    (the host then keeps tmux's hang-up alone)."""
    ticks = max(1, round(grace_s * 10))
    return (
        _GREP_Z + _scan(shells) + "seen=' '; n=0; "
        f'while p=$(scan); [ -n "$p" ] && [ $n -lt {ticks} ]; do new=; '
        'for x in $p; do case "$seen" in *" $x "*) ;; *) new="$new $x"; seen="$seen$x ";; esac; done; '
        '[ -n "$new" ] && { kill -TERM $new; kill -CONT $new; } 2>/dev/null; '
        "sleep 0.1 2>/dev/null || sleep 1; n=$((n+1)); done; "
        'k=0; while p=$(scan); [ -n "$p" ] && [ $k -lt 50 ]; do kill -KILL $p 2>/dev/null; '
        "sleep 0.1 2>/dev/null || sleep 1; k=$((k+1)); done; "
        'set -- $seen; e=$#; set -- $(scan); printf "ended=%s left=%s\\n" "$e" "$#"'
    )


class Sweeper:
    """The sweeps of one host: ``marked`` before a respawn, ``sweep`` after a close or respawn."""

    def __init__(
        self, *, name: str, sh: RemoteShell, grace_s: float, spawn: Callable[[asyncio.Task[None]], None]
    ) -> None:
        self._name = name
        self._sh = sh
        self._grace = grace_s
        self._adopt = spawn  # the host keeps (and cancels at its close) the task that sweeps
        self._waiting: list[tuple[Marked, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def marked(self, shell_id: str) -> tuple[int, ...]:
        """The processes on the host that carry the shell's marker (none known on failure)."""
        try:
            reply = await self._sh.run(marked_script(shell_id))
        except HostError:
            return ()
        return parse_pids(reply.out) if reply.status == 0 else ()

    async def sweep(self, shell_id: str, pids: tuple[int, ...] | None = None) -> None:
        """End what the shell left running (``pids``: only those); returns once they have exited,
        or the host could not be asked (logged: a host out of reach keeps them)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(((shell_id, pids), done))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._adopt(self._task)
        await asyncio.shield(done)

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch = [marked for marked, _ in self._waiting]
                names = ", ".join(shell_id for shell_id, _ in batch)
                try:
                    reply = await self._sh.run(
                        sweep_script(batch, self._grace), timeout=self._grace + _SLACK_S
                    )
                except HostError as exc:
                    logger.warning("host %s: ending what %s left failed: %s", self._name, names, exc.message)
                else:
                    if reply.status != 0 or not reply.out.endswith("left=0"):
                        said = reply.out or reply.status
                        logger.warning("host %s: ending what %s left: %s", self._name, names, said)
                _release(self._waiting[: len(batch)])
                del self._waiting[: len(batch)]
        finally:  # cancelled (the host closes): nobody waits for ever
            _release(self._waiting)
            self._waiting.clear()


def _release(waiting: list[tuple[Marked, asyncio.Future[None]]]) -> None:
    for _, done in waiting:
        if not done.done():
            done.set_result(None)
