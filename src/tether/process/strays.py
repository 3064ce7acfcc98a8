"""Ending processes that are not ours to wait for: everything a persistent shell started.

A persistent shell's processes are children of the tmux server, not of tether, and a closed
shell's ``setsid``, ``nohup`` or disowned ones outlive its session: tmux's SIGHUP reaches the
session only. They are found here by what they inherited — the shell's marker variables
(``TETHER_SHELL`` with ``TETHER_HOME``, kept through ``setsid``, double forks and ``nohup``) —
and by being descendants of the shell: a local shell adopts what its processes orphan
(``process.adopt``), so that catches one that cleared its environment and left its session too.

Invariants this module owns:

- A found process is pinned by a pidfd at once, and only ever signalled through it: a pid the
  kernel hands to an unrelated process after ours ended is never signalled.
- ``end`` returns once every pinned process has exited (SIGTERM, and SIGCONT for stopped ones;
  SIGKILL after the grace), or past a bound for one stuck in uninterruptible sleep (on a hung
  network file system, in a frozen cgroup) or that this process may not signal (another user's,
  where tether is not root): those it returns, as ``Survivor``s, for the caller to report.
  Processes the found ones fork meanwhile are found by ``rescan`` and ended with them. A cancelled
  ``end`` SIGKILLs what is left at once and finishes before the cancellation goes on.
- Zombies among them that are our own children (re-parented to us, the subreaper) are collected.

Spared: a descendant that carries ``OWN_PROCESS`` (tether's own, started from the shell), and
what is below it. What is *not* found: a process that dropped the marker (``env -i``) and was no
longer a descendant of the shell when it was looked for (``env -i setsid x &`` orphans itself at
once), where the shell does not adopt orphans. (A remote host's shells are swept by
``shells.hosts.ssh.sweep``, by the same rules.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio

from tether.process.adopt import OWN_PROCESS
from tether.process.container import read_proc
from tether.process.tree import descendants, environ_of, reap_adopted

_OWN = b"\0" + OWN_PROCESS.encode() + b"="
_STUCK_AFTER_KILL_S = 5.0  # past SIGKILL: a process in uninterruptible sleep is left


def _marked(markers: tuple[bytes, ...]) -> set[int]:
    """Processes whose environment holds every ``NAME=value`` of ``markers``."""
    me = os.getpid()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        environ = b"\0" + environ_of(int(name))  # waits out an exec in flight
        if all(b"\0" + marker + b"\0" in environ + b"\0" for marker in markers):
            found.add(int(name))
    return found


@dataclass(frozen=True, slots=True)
class Survivor:
    """A process an ending left running: its pid and command line (``[comm]`` when it shows
    none, as ``ps`` does; at most ``COMMAND_MAX`` characters)."""

    pid: int
    command: str


COMMAND_MAX = 200


def command_text(argv: bytes, comm: bytes = b"") -> str:
    """``/proc/PID/cmdline`` as one line (``comm`` in brackets when it is empty)."""
    words = [w for w in argv.split(b"\0") if w] if argv else []
    text = " ".join(os.fsdecode(w) for w in words) if words else f"[{os.fsdecode(comm.strip())}]"
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= COMMAND_MAX else text[: COMMAND_MAX - 1] + "…"


def _survivor(pid: int) -> Survivor:
    argv = comm = b""
    with contextlib.suppress(OSError):
        argv = read_proc(f"/proc/{pid}/cmdline")
    with contextlib.suppress(OSError):
        comm = read_proc(f"/proc/{pid}/comm")
    return Survivor(pid, command_text(argv, comm))


def _tethers_own(pid: int) -> bool:
    return _OWN in b"\0" + environ_of(pid)


class Strays:
    """Processes pinned for ending (pid → pidfd). Close them with ``end`` (or ``release``)."""

    def __init__(self) -> None:
        self._pinned: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._pinned)

    def find(self, *, roots: Iterable[int] = (), markers: Iterable[str] = ()) -> None:
        """Pin ``roots`` and their descendants, every process carrying all ``markers``
        (``NAME=value``) and theirs, and the descendants of what is already pinned."""
        wanted = tuple(marker.encode() for marker in markers)
        seeds = set(roots) | set(self._pinned)
        if wanted:
            seeds |= _marked(wanted)
        # Never this process (a tether started inside the shell closes it; its children go), nor
        # one of tether's own that a command of the shell started (the home's tmux server, its
        # tools process): the shell adopted it, but it serves others.
        for pid in descendants(seeds, spare=_tethers_own) - set(self._pinned) - {os.getpid()}:
            with contextlib.suppress(OSError):  # gone already: nothing to end
                self._pinned[pid] = os.pidfd_open(pid)

    def _drop_exited(self) -> None:
        for pid, fd in list(self._pinned.items()):
            if _exited(fd):
                reap_adopted(pid)
                os.close(fd)
                del self._pinned[pid]

    async def end(
        self, grace_s: float, *, rescan: Callable[[Strays], None] | None = None
    ) -> tuple[Survivor, ...]:
        """SIGTERM (and SIGCONT) every pinned process, SIGKILL what is left after ``grace_s``;
        returns once all have exited — nothing — or, ``_STUCK_AFTER_KILL_S`` after the SIGKILL,
        the processes still running (by pid). ``rescan`` pins what they forked meanwhile (off the
        loop).

        Cancelled (the call's client cancelled it, left, or its session ended), it does not
        abandon them: nothing else would find them once their shell is gone, and no grace is left
        to give, so what is left gets SIGKILL at once; then the cancellation goes on."""
        try:
            return await self._end(grace_s, rescan)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await self._end(0.0, rescan)
            raise
        finally:
            self.release()

    async def _end(self, grace_s: float, rescan: Callable[[Strays], None] | None) -> tuple[Survivor, ...]:
        loop = asyncio.get_running_loop()
        kill_at = loop.time() + grace_s
        give_up = kill_at + _STUCK_AFTER_KILL_S
        termed: set[int] = set()
        pause = 0.001
        while True:
            self._drop_exited()
            if not self._pinned:
                return ()
            if loop.time() >= give_up:
                return tuple(_survivor(pid) for pid in sorted(self._pinned))
            killing = loop.time() >= kill_at
            for pid, fd in self._pinned.items():
                if killing:
                    _send(fd, signal.SIGKILL)
                elif pid not in termed:
                    termed.add(pid)
                    _send(fd, signal.SIGTERM)
                    _send(fd, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
            await asyncio.sleep(pause)  # the death of processes that are not ours: polled
            pause = min(pause * 2, 0.05)
            if rescan is not None:
                await asyncio.to_thread(rescan, self)

    def release(self) -> None:
        for fd in self._pinned.values():
            os.close(fd)
        self._pinned.clear()


def _send(pidfd: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):  # exited meanwhile
        signal.pidfd_send_signal(pidfd, sig)


def _exited(pidfd: int) -> bool:
    """A pidfd turns readable once its process has exited (a zombie counts)."""
    readable, _, _ = select.select([pidfd], [], [], 0)
    return bool(readable)
