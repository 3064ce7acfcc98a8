"""The persistent shells of one ``TETHER_HOME`` in one process: hosts, records, safety, runs.

Invariant: tmux is the daemon. Every shell is a tmux session named by its id on its host's one
server; nothing here holds a shell's state that tmux, the log or the store does not also hold,
except what this process is doing right now (runs it waits for, calls it is running on a shell).
So any process may die and another pick the shells up. One ``Shells`` exists per home and event
loop (``Shells.get``); its hosts are started on that loop.

The operations (``open``, ``run``, ``send``, ``read``, ``state``, ``manage``) live in their own
modules and take a ``Shells``; this class is what they share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from tether.config import Config, ensure_home
from tether.errors import NotFoundError, RefusedError, TetherError, UsageError
from tether.shell import SandboxSettings
from tether.shells.host import ShellHost
from tether.shells.hosts import Confinement, HostError, LocalHost, default_confinement, remote_hosts
from tether.shells.integration.events import EventScanner, ShellEvent
from tether.shells.integration.tracker import Activity, activity_of, last_activity
from tether.shells.logs import check_live, log_size, read_range
from tether.shells.records import Records, ShellRecord
from tether.shells.safety.call_notes import note_host
from tether.shells.safety.hooks import SessionHooks
from tether.shells.tmux.commands import PaneInfo
from tether.shells.tmux.control import SessionError
from tether.shells.waits import WaitEngine
from tether.store.db import Store


@dataclass(slots=True, kw_only=True)
class PendingRun:
    """A run this process typed and still waits for (until its record is saved)."""

    run_id: str
    shell_id: str
    token: int
    command: str
    actor: str
    started_ms: int
    log_offset: int
    prompt_before: int
    typed_as_input: str | None = None  # the program the text went to instead of the shell


class Shells:
    """See the module docstring."""

    _instances: ClassVar[dict[tuple[str, int], Shells]] = {}

    def __init__(
        self, config: Config, *, store: Store | None = None, hooks: SessionHooks | None = None
    ) -> None:
        self.config = config
        self.home = ensure_home(config.home)
        self.store = store if store is not None else Store.open(self.home)
        self._own_store = store is None  # closed with these shells (a given one is its giver's)
        self.records = Records(self.store)
        self.hooks = hooks if hooks is not None else SessionHooks()
        self.local = LocalHost(config)
        self.hosts: dict[str, ShellHost] = {"local": self.local, **remote_hosts(config)}
        # Hosts the latest look could not reach, with why (their shells are not live from here).
        self.down: dict[str, HostError] = {}
        self._waits: dict[str, WaitEngine] = {
            name: WaitEngine(h, seen=self._seen, numbered=self._numbered) for name, h in self.hosts.items()
        }
        self.pending: dict[str, PendingRun] = {}
        # Live shells without a record (opened by another state directory on a shared remote
        # home): the host they were seen on.
        self._unrecorded: dict[str, str] = {}
        # Per shell: its nonce (fixed for the shell's life, respawn included), and the phase read
        # so far with the scanner that continues from where it stopped: a phase costs the bytes
        # printed since the last look, not a scan of the log.
        self._nonces: dict[str, str] = {}
        # Per recorded shell: its host (fixed at open: a shell never moves, a revived one gets a
        # new id), so the several lookups of one call cost no store query.
        self._host_names: dict[str, str] = {}
        self._confinements: dict[str, Confinement | None] = {}
        self._phases: dict[str, tuple[EventScanner, Activity]] = {}
        # Per shell with a call of an agent on it now: the calls' actors (a shell without one is
        # not kept).
        self.ai_busy: dict[str, set[str]] = {}
        # Per shell: text this process typed into a program in front since its last Enter — a
        # shell may read it later (type-ahead), so the guard judges it with what completes it.
        self.typed_ahead: dict[str, str] = {}
        # Per shell: log offset where this process pressed the key that runs a line a send put
        # together (no run token): until the shell reports taking it, its prompt is spoken for.
        self.accepted: dict[str, int] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    def get(cls, config: Config) -> Shells:
        """The shells of ``config.home`` on the running loop (created and started on first use)."""
        loop = asyncio.get_running_loop()
        key = _cache_key(config.home, loop)
        found = cls._instances.get(key)
        # id() of a closed loop can be reused by a new one: the loop object itself must match.
        if found is None or found._closed or found._loop is not loop:
            found = cls(config)
            found._loop = loop
            try:
                for host in found.hosts.values():
                    host.start()
            except BaseException:
                # Not kept, so not closed later: release now what it opened (nothing of its hosts
                # runs yet but the watchers that did start), or each failed call leaks descriptors.
                for host in found.hosts.values():
                    host.watcher.close()
                found.store.close()
                raise
            from tether.shells.idle import sweep_forever

            found._sweeper = loop.create_task(sweep_forever(found))
            cls._instances[key] = found
        return found

    @classmethod
    def running(cls, home: Path) -> Shells | None:
        """This event loop's ``Shells`` of ``home``, if one was started and is not closed."""
        loop = asyncio.get_running_loop()
        found = cls._instances.get(_cache_key(home, loop))
        return found if found is not None and not found._closed and found._loop is loop else None

    @classmethod
    async def close_home(cls, home: Path) -> None:
        """Close this event loop's ``Shells`` of ``home`` (if one was started)."""
        loop = asyncio.get_running_loop()
        found = cls._instances.get(_cache_key(home, loop))
        if found is not None and found._loop is loop:
            await found.close()

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for host in self.hosts.values():
            await host.close()
        for key, found in list(self._instances.items()):
            if found is self:
                del self._instances[key]
        if self._own_store:  # its connections, not the garbage collector's (3.13 warns of those)
            self.store.close()

    # ---- hosts and panes ------------------------------------------------------------------------

    def host_name(self, shell_id: str) -> str:
        """The name of the host a shell lives on (noted for the call's audit record)."""
        name = self._host_names.get(shell_id)
        if name is None:
            rec = self.records.shell(shell_id)
            if rec is not None:
                name = self._host_names[shell_id] = rec.host
            else:
                name = self._unrecorded.get(shell_id, "local")
        note_host(shell_id, name)
        return name

    def host_of(self, shell_id: str) -> ShellHost:
        name = self.host_name(shell_id)
        host = self.hosts.get(name)
        if host is None:
            raise NotFoundError(f"shell {shell_id} lives on host {name!r}, which is not configured here")
        return host

    def check_host(self, name: str, path: str) -> ShellHost:
        """The configured host ``name`` (``UsageError`` naming the configured ones)."""
        host = self.hosts.get(name)
        if host is None:
            raise UsageError(
                f"{path}: no host {name!r} is configured; configured hosts: {', '.join(sorted(self.hosts))} "
                "(add others as [hosts.NAME] tables in config.toml)"
            )
        return host

    async def _panes_everywhere(
        self, *, lean: bool = False, only: Sequence[str] | None = None
    ) -> dict[str, dict[str, PaneInfo]]:
        """Every host's panes, asked of all hosts at once; a host that cannot be reached is
        recorded in ``down`` (with why) and lists nothing. ``lean``, ``only``: see
        ``ShellHost.panes``."""
        hosts = list(self.hosts.values())
        found: list[dict[str, PaneInfo] | BaseException]
        if len(hosts) == 1:  # the usual deployment: no task per host
            try:
                found = [await hosts[0].panes(lean=lean, only=only)]
            except HostError as exc:
                found = [exc]
        else:
            found = await asyncio.gather(
                *(h.panes(lean=lean, only=only) for h in hosts), return_exceptions=True
            )
        out: dict[str, dict[str, PaneInfo]] = {}
        for host, panes in zip(hosts, found, strict=True):
            if isinstance(panes, HostError):
                self.down[host.name] = panes
                continue
            if isinstance(panes, BaseException):
                raise panes
            self.down.pop(host.name, None)
            out[host.name] = panes
            if host.name != "local":
                gone = [s for s, where in self._unrecorded.items() if where == host.name and s not in panes]
                for shell_id in gone:
                    del self._unrecorded[shell_id]
                self._unrecorded.update(dict.fromkeys(panes, host.name))
        return out

    def waits(self, host: ShellHost) -> WaitEngine:
        return self._waits[host.name]

    def expect_listing(self, only: Sequence[str] | None = None) -> None:
        """A call that begins with ``live(lean=True, only=only)`` is on its way: each reachable
        host asks tmux now (``ShellHost.expect_listing``)."""
        for host in self.hosts.values():
            if host.name not in self.down:
                host.expect_listing(only)

    async def live(self, *, lean: bool = False, only: Sequence[str] | None = None) -> dict[str, PaneInfo]:
        """Every live shell on every host, fresh from tmux (a pane whose shell ended is kept by
        tmux, with its exit status, until the idle sweep removes it: it is not live). ``lean``:
        each pane's cwd and foreground name may be older (see ``ShellHost.panes``). ``only``: of
        these shells alone, for a call that names its shells (the others are not asked about)."""
        found: dict[str, PaneInfo] = {}
        for panes in (await self._panes_everywhere(lean=lean, only=only)).values():
            found.update({k: p for k, p in panes.items() if not p.dead})
        return found

    async def ended(self) -> dict[str, PaneInfo]:
        """Panes whose shell has ended (tmux keeps them with their exit status)."""
        found: dict[str, PaneInfo] = {}
        for panes in (await self._panes_everywhere()).values():
            found.update({k: p for k, p in panes.items() if p.dead})
        return found

    async def closed_meanwhile(self, shell_id: str, exc: TetherError) -> TetherError:
        """What a caller is told for ``exc``, which an operation on ``shell_id`` raised after the
        shell was found live: when tmux refused a command (``SessionError``, such as "can't find
        pane: %12") because the shell has been closed since — by a concurrent call, a person, the
        idle sweep — a ``NotFoundError`` naming the shell and the fix; otherwise ``exc`` itself."""
        if not isinstance(exc, SessionError):
            return exc
        try:
            # Its own host only: a remote host that cannot be reached now lists nothing, which
            # says nothing about the shell (it raises, and tmux's words stand).
            pane = (await self.host_of(shell_id).panes(lean=True)).get(shell_id)
        except TetherError:
            return exc  # cannot tell: tmux's own words are the best there is
        if pane is not None and not pane.dead:
            return exc
        return NotFoundError(
            f"shell {shell_id} was closed while this task worked on it (by another call, a person or "
            "the idle sweep); what the task had done by then stays done; list live shells with "
            "shell_state scope='*', or open a new one with shell_open"
        )

    async def pane(self, shell_id: str, *, output: bool = True) -> tuple[ShellHost, PaneInfo]:
        """The live shell's host and pane. ``output``: the caller follows the shell's output, which
        tether reads only from its log, so a log removed or replaced is refused here, by name
        (closing, renaming, resizing and the screen do without it)."""
        host = self.host_of(shell_id)
        pane = await host.pane(shell_id)
        if output:
            check_live(host.log_of(shell_id), shell_id)
        return host, pane

    def log_of(self, shell_id: str) -> Path:
        return self.host_of(shell_id).log_of(shell_id)

    def nonce_of(self, shell_id: str) -> str | None:
        nonce = self._nonces.get(shell_id)
        if nonce is None:
            rec = self.records.shell(shell_id)
            if rec is None or not rec.nonce:
                return None
            nonce = self._nonces[shell_id] = rec.nonce
        return nonce

    # ---- confinement ------------------------------------------------------------------------------

    @property
    def confines(self) -> bool:
        """This deployment confines every shell (``--sandbox``, ``[shell] provider = "sandbox"``)."""
        return self.config.shell.provider == "sandbox"

    def default_confinement(self) -> Confinement | None:
        """What a shell opened here without asking for more gets (``None``: unconfined)."""
        return default_confinement(SandboxSettings.from_config(self.config)) if self.confines else None

    def confinement_of(self, shell_id: str) -> Confinement | None:
        """The shell's confinement as its record carries it (fixed for its life)."""
        if shell_id not in self._confinements:
            rec = self.records.shell(shell_id)
            if rec is None:
                return None  # no record: nobody knows how it started
            self._confinements[shell_id] = Confinement.from_json(rec.confinement)
        return self._confinements[shell_id]

    def set_confinement(self, shell_id: str, confinement: Confinement | None) -> None:
        self.records.set_confinement(shell_id, confinement.to_json() if confinement is not None else "")
        self._confinements[shell_id] = confinement

    def check_writable(self, shell_id: str) -> None:
        """A confining deployment writes only to shells that are confined or were granted to run
        unconfined: a shell opened before it confined (or not by tether) runs as the user."""
        if self.confines and self.confinement_of(shell_id) is None:
            raise RefusedError(
                f"shell {shell_id} runs unconfined (it was opened without the sandbox), and this deployment "
                "confines every shell; nothing was sent. Open a new shell with shell_open (it is confined), "
                "or ask the user to close this one"
            )

    # ---- what this process holds per shell ----------------------------------------------------------

    def held(self) -> set[str]:
        """The shells this process holds something of (``forget`` drops it)."""
        held = {*self._nonces, *self._host_names, *self._confinements, *self._phases}
        held.update(self.typed_ahead, self.accepted)
        for host in self.hosts.values():
            held |= host.held()
        return held

    def forget(self, shell_id: str) -> None:
        """The shell was closed (here or by another process): drop what this process holds of it.
        Its record, log and snapshot stay where they are; a call naming it reads them there."""
        for per_shell in (self._nonces, self._host_names, self._confinements, self._phases):
            per_shell.pop(shell_id, None)
        self.typed_ahead.pop(shell_id, None)
        self.accepted.pop(shell_id, None)
        for host in self.hosts.values():
            host.release(shell_id)

    def prune(self, open_ids: Collection[str]) -> None:
        """Forget every shell this process holds something of that is not open (``open_ids``: the
        records not closed) nor a remote shell without a record: closed by another process, or by
        this one while its log still received the last bytes. A server that opens and closes shells
        for weeks holds only the open ones."""
        for shell_id in self.held().difference(open_ids, self._unrecorded):
            self.forget(shell_id)

    def set_nonce(self, shell_id: str, nonce: str) -> None:
        self.records.set_nonce(shell_id, nonce)
        self._nonces[shell_id] = nonce
        self._phases.pop(shell_id, None)

    def activity(self, shell_id: str) -> Activity | None:
        """What the shell is doing, from its last own event (``None``: no integration known).

        A run typed after that event (its keys sent, by this or another process) that the shell has
        not reported taking makes it ``typed``: the prompt that event showed is already spoken for."""
        nonce = self.nonce_of(shell_id)
        if nonce is None:
            return None
        activity = self._phase(shell_id, nonce)
        since = activity.event.end if activity.event is not None else 0
        typed = [r.log_offset for r in self.pending.values() if r.shell_id == shell_id and r.token]
        last = self.records.last_run(shell_id)
        if last is not None and last.token and last.typed_as_input is None:
            typed.append(last.log_offset)
        if shell_id in self.accepted:
            typed.append(self.accepted[shell_id])
        if activity.phase == "prompt" and typed and max(typed) >= since:
            return replace(activity, phase="typed")
        return activity

    def _seen(self, shell_id: str, start: int, scanner: EventScanner, events: list[ShellEvent]) -> None:
        """A wait read the log from ``start`` with ``scanner`` and saw ``events``: when the phase
        had been read exactly that far (same nonce, no sequence left open), it continues from
        there instead of reading those bytes again."""
        known = self._phases.get(shell_id)
        if known is None or known[0].nonce != scanner.nonce or known[0].pos != start or known[0].open:
            return
        self._phases[shell_id] = (scanner, activity_of(events, known[1]))

    def _numbered(self, shell_id: str, nonce: str, start: int) -> int:
        """The highest event number of the shell known to have been printed before log offset
        ``start`` (0: none known): a wait's scanner starting there drops events not above it, so a
        program that prints the shell's own log cannot end the wait with an old event."""
        known = self._phases.get(shell_id)
        if known is None or known[0].nonce != nonce.encode() or known[0].pos > start:
            return 0
        return known[0].number

    def _phase(self, shell_id: str, nonce: str) -> Activity:
        path = self.log_of(shell_id)
        size = log_size(path)
        known = self._phases.get(shell_id)
        if known is None or known[0].nonce != nonce.encode() or known[0].pos > size:
            activity, scanner = last_activity(path, nonce)
        else:
            scanner, activity = known
            if scanner.pos < size:
                activity = activity_of(scanner.feed(read_range(path, scanner.pos, size)), activity)
        self._phases[shell_id] = (scanner, activity)
        return activity

    def record(self, shell_id: str) -> ShellRecord | None:
        return self.records.shell(shell_id)


def _cache_key(home: Path, loop: asyncio.AbstractEventLoop) -> tuple[str, int]:
    return (_resolved(home), id(loop))


_RESOLVED: dict[Path, str] = {}


def _resolved(home: Path) -> str:
    """``home`` with its links resolved, once per path (every tool call asks, twice)."""
    found = _RESOLVED.get(home)
    if found is None:
        found = _RESOLVED[home] = str(home.resolve())
    return found
