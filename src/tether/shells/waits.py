"""The wait engine: block until a condition holds in a shell, or report that it did not in time.

Invariant: conditions the shell or its output announce — a run's end and exit status, the prompt,
``bell``, ``match``, the screen settling — are decided from the bytes the log receives, woken by
inotify, never by polling tmux; only conditions nothing announces (``file``, ``noproc``, ``cpu``,
``foreground``) are re-checked every ``poll_ms``, and ``cpu``/``noproc`` of a run only once the run
has started and its process was seen. A ``match`` of a command typed at the prompt (a run, a step)
is tried only on what follows the command's start event: the shell echoing the typed line is input,
so a pattern the command itself contains waits for what it prints. A ``settle`` after text typed to
a program (``program_idle``) also asks, once the screen is quiet and then every ``poll_ms``,
whether what is in front still works (``ShellHost.front_busy``): a program that computes, or exits,
without printing is not idle; once nothing works it is idle only if the log, proven caught up with
the terminal (``ShellHost.sync_log``), brought nothing more — what the program printed last may
still be on its way (a remote host's mirror). A condition asked of the host is answered likewise
with the log caught up to the moment it held. A sync mark is never output. A timeout is a result
(``timed_out``), never a kill; ``exit`` with an expected ``code`` returns as soon as the status is
known, met or not. A shell that ends (its exit event, a dead pane, a killed session) ends every
wait on it with ``shell_gone`` and the status it ended with, when one is known. A remote host's
connection that drops under a wait ends it with that host's one connection-lost error, whichever
host call found out (``ShellHost.lost_in_wait``). A run whose command replaced the shell's bash
(``exec sh``) cannot end by bash's events: a wait for its end ends, not met, naming the program.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from tether.errors import NotFoundError
from tether.shells.host import ShellHost
from tether.shells.integration.events import EventScanner, ShellEvent, only_sync_marks
from tether.shells.integration.tracker import RunTrack
from tether.shells.logs import log_size, read_at
from tether.shells.offload import Unfinished, Upgraded, bounded, offloaded
from tether.shells.reading import match_lines
from tether.shells.termtext import has_bell
from tether.shells.tmux.commands import PaneInfo

_ALIVE_S = 1.0  # how often a sleeping wait re-checks that the shell still exists
_SCAN_CHUNK = 8 * 1024 * 1024
_LOST_QUIET_S = 0.3  # a started run's shell quiet this long: look whether it reads a line unreported
_QUIET_S = 0.05  # a bare shell_read idle on a shell without integration events: this long quiet
# The sync mark follows the pane's output by microseconds (a remote host: a round trip); a log
# that stopped following its pane must not hold a condition that already holds for long.
_CAUGHT_UP_S = 2.0
# The kinds a run's end (bash's own event) decides.
_RUN_END = ("exit", "idle", "prompt")
_SEEN_MAX = 64  # events a wait keeps for the shell's phase (a run has about four)

# A question asked of the host at (or after) the wait's deadline still gets this long to answer:
# one round trip of a real network, not the 15 s a silent host is given before it is called lost.
_ASK_FLOOR_S = 0.25
_T = TypeVar("_T")

# Told what a wait read of a shell's log: (shell, where it started, its scanner, every event read).
Seen = Callable[[str, int, EventScanner, list[ShellEvent]], None]
# The highest event number the shell printed before a log offset, if known (shell, nonce, offset).
Numbered = Callable[[str, str, int], int]


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSpec:
    kind: str  # none | idle | bell | match | exit | file | noproc | cpu | foreground | settle | prompt
    timeout_ms: int = 30_000
    poll_ms: int = 150
    code: int | None = None
    regex: re.Pattern[str] | None = None
    path: str | None = None
    proc: str | None = None
    threshold: float | None = None
    # ``match`` runs on the masked text: a pattern over a vault value never matches it. The mask
    # as it is now, as a value a worker process can hold (``SessionHooks.masking``).
    masking: Callable[[], Callable[[str], str]] | None = None
    # ``settle`` for text typed to a program (what ``idle`` means there): the screen quiet *and*
    # nothing in front working, so that ``exit()`` typed to a REPL is answered at the shell's prompt.
    program_idle: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitOutcome:
    kind: str
    met: bool
    timed_out: bool = False
    exit_code: int | None = None
    elapsed_ms: int = 0
    detail: str = ""
    begin_offset: int | None = None  # where the run's own output starts (after its start event)
    end_offset: int = 0  # where the run's output ends (its next prompt), else the log end seen
    shell_gone: bool = False
    run_started: bool = False
    run_verdict: str = "pending"
    # The wait's time ran out while the host owed it an answer: the host is silent, not known to
    # be gone (its connection's watchdog decides that); nothing more is asked of it for this call.
    host_silent: bool = False
    replaced_by: str = ""  # the program that replaced the shell's bash under the run (``exec sh``)


class ShellReplaced(Exception):
    """Raised by a wait's ``on_lost``: the shell's own process is now another program (``exec sh``
    typed as the run), so no event of bash's will ever end the run."""

    def __init__(self, program: str, detail: str) -> None:
        super().__init__(detail)
        self.program = program
        self.detail = detail


class _Overdue(Exception):
    """A question to the host was still unanswered at the wait's deadline (it was cancelled)."""

    def __init__(self, asked: float) -> None:
        super().__init__()
        self.asked = asked


async def _by(deadline: float, question: Awaitable[_T]) -> _T:
    """``question``'s answer, if it comes before ``deadline`` (or within ``_ASK_FLOOR_S`` of asking,
    whichever is later); else it is cancelled and ``_Overdue`` raised. A host whose network went
    silent is ended by its watchdog only after 15 s: a wait of 2 s answers at 2 s all the same."""
    asked = time.monotonic()
    task = asyncio.ensure_future(question)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(deadline - asked, _ASK_FLOOR_S))
    finally:
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    raise _Overdue(asked)


@dataclass(slots=True, kw_only=True)
class _Scan:
    """Reads a log forward from an offset: events, bells, matches, and when output last arrived."""

    path: Path
    pos: int
    spec: WaitSpec
    events: EventScanner | None
    last_output: float
    bell: bool = False
    matched: str | None = None
    overran: str | None = None  # why a match could not be tried or finished (``_fed``): the detail
    # A match wait of a command typed at the prompt: the token of its start event (``C``). Until
    # that event the log holds the shell echoing the typed line, which is input, not output: a
    # pattern that also occurs in the command itself must wait for what the command prints.
    match_gate: int | None = None
    seen_event: ShellEvent | None = None
    # Every event read, in order, while few (``None`` once too many): what the shell's phase
    # follows from without reading those bytes again (``Seen``).
    seen: list[ShellEvent] | None = field(default_factory=list)
    # The last read stopped at its chunk's end, not at the log's: read again before sleeping.
    behind: bool = False
    _text: str = ""

    def take(self) -> tuple[bytes, list[ShellEvent]] | None:
        """What is new and its events (``None``: nothing was); a ``match`` is ``_fed``'s."""
        data = read_at(self.path, self.pos, _SCAN_CHUNK)
        self.behind = len(data) == _SCAN_CHUNK
        if not data:
            return None
        if not only_sync_marks(data):  # a log proven caught up has printed nothing
            self.last_output = time.monotonic()
        self.pos += len(data)
        events = self.events.feed(data) if self.events is not None else []
        if events:
            self.seen_event = events[-1]
            if self.seen is not None:
                self.seen = self.seen + events if len(self.seen) + len(events) <= _SEEN_MAX else None
        if self.spec.kind == "bell" and not self.bell and has_bell(data):
            self.bell = True
        return data, events

    @property
    def wants_match(self) -> bool:
        return self.spec.kind == "match" and self.spec.regex is not None and self.matched is None

    def _matching(self) -> tuple[re.Pattern[str], Callable[[str], str] | None]:
        assert self.spec.regex is not None
        return self.spec.regex, self.spec.masking() if self.spec.masking is not None else None


_INLINE_FEED = 256 * 1024  # below this, reading and scanning is cheaper than a thread hop
_MATCH_FLOOR_S = 0.25  # a match tried at the wait's last moment still gets this long


async def _fed(scan: _Scan, deadline: float) -> list[ShellEvent] | None:
    """What is new, read (off the event loop when much is) and, for a match wait, matched by a
    worker process within the wait's time (``offload.bounded``: the pattern is the model's, and one
    can backtrack for years on a short line); ``scan.overran`` says why when it could not be."""
    new = log_size(scan.path) - scan.pos
    if new <= 0:
        return None
    taken = scan.take() if new < _INLINE_FEED else await offloaded(scan.take)
    if taken is None:
        return None
    data, events = taken
    if scan.wants_match and scan.match_gate is not None:
        data = _after_start(scan, data, events)
    if scan.wants_match and data:
        within = max(deadline - time.monotonic(), _MATCH_FLOOR_S)
        try:
            scan.matched, scan._text = await bounded(within, match_lines, scan._text, data, *scan._matching())
        except Upgraded as exc:
            scan.overran = f"the pattern could not be tried: {exc}"
        except Unfinished as exc:
            scan.overran = (
                f"the pattern did not finish on the output: {exc}; a pattern with nested quantifiers "
                "such as (a+)+ can take forever on one line: simplify it"
            )
    return events


def _after_start(scan: _Scan, data: bytes, events: list[ShellEvent]) -> bytes:
    """The part of ``data`` (just taken, ending at ``scan.pos``) after the gating run's start
    event; nothing while that event has not come. The gate opens once, with an empty carry: the
    echoed line's unfinished end is not the start of the command's output."""
    begin = scan.pos - len(data)
    for ev in events:
        if ev.kind == "C" and ev.token == scan.match_gate:
            scan.match_gate = None
            scan._text = ""
            return data[max(ev.end - begin, 0) :]
    return b""


class WaitEngine:
    """Runs one ``WaitSpec`` against one shell of one host."""

    def __init__(self, host: ShellHost, seen: Seen | None = None, numbered: Numbered | None = None) -> None:
        self.host = host
        self._seen = seen
        self._numbered = numbered

    async def wait(
        self,
        pane: PaneInfo,
        spec: WaitSpec,
        start: int,
        *,
        nonce: str | None = None,
        run: RunTrack | None = None,
        at_prompt: bool = False,
        on_lost: Callable[[], Awaitable[bool]] | None = None,
        shown_prompt: int = -1,
    ) -> WaitOutcome:
        """Wait from log offset ``start``. ``run`` binds the wait to one typed run; ``nonce`` lets
        a run-less ``idle`` see the shell's prompt; ``at_prompt`` says it is there already.
        ``on_lost`` is asked when the run's shell has been quiet a while: it returns True once it
        found the integration lost (``exec bash`` replaced the shell) and installed it again, and
        raises ``ShellReplaced`` once another program replaced it (``exec sh``): a wait for the
        run's end then ends, not met, saying so.
        ``shown_prompt`` is the number of the prompt already on the screen: a redraw of it is no
        new prompt."""
        t0 = time.monotonic()
        waker = self.host.watcher.waker(pane.shell_id)
        scan = _Scan(
            path=self.host.log_of(pane.shell_id),
            pos=start,
            spec=spec,
            events=self._scanner(pane.shell_id, nonce, start) if nonce else None,
            last_output=t0 if spec.kind == "settle" else _mtime(self.host.log_of(pane.shell_id), t0),
            match_gate=(
                run.token
                if spec.kind == "match" and nonce and run is not None and run.started is None
                else None
            ),
        )
        try:
            outcome = await self._loop(
                pane, spec, scan, waker, t0, nonce, run, at_prompt, on_lost, shown_prompt
            )
        except _Overdue as overdue:
            outcome = self._silent(spec, scan, t0, run, overdue)
        except Exception as exc:
            lost = self.host.lost_in_wait(exc)
            if lost is exc:
                raise
            raise lost from exc
        finally:
            self.host.watcher.drop(pane.shell_id, waker)
        # Only after a wait that ended by itself: one cancelled in a read off the loop would leave
        # its scanner still moving.
        if self._seen is not None and scan.events is not None and scan.seen is not None:
            self._seen(pane.shell_id, start, scan.events, scan.seen)
        return outcome

    def _scanner(self, shell_id: str, nonce: str, start: int) -> EventScanner:
        after = self._numbered(shell_id, nonce, start) if self._numbered is not None else 0
        return EventScanner(nonce, start, after=after)

    async def _loop(
        self,
        pane: PaneInfo,
        spec: WaitSpec,
        scan: _Scan,
        waker: asyncio.Event,
        t0: float,
        nonce: str | None,
        run: RunTrack | None,
        at_prompt: bool,
        on_lost: Callable[[], Awaitable[bool]] | None,
        shown_prompt: int,
    ) -> WaitOutcome:
        deadline = t0 + spec.timeout_ms / 1000
        poll_s = max(spec.poll_ms, 20) / 1000
        next_poll = t0
        next_alive = t0 + _ALIVE_S
        seen_proc = False
        next_lost = t0
        cpu_prev: tuple[float, float] | None = None
        prompt = at_prompt
        exited: ShellEvent | None = None
        synced: float | None = None  # a program_idle's log was proven caught up at this output
        held: tuple[bool, str] | None = None  # a condition asked of the host, its log now caught up
        connection = self.host.connection_mark()
        while True:
            waker.clear()
            # A remote host's connection dropped: what it printed meanwhile may never have arrived.
            self.host.check_connection(connection)
            # One read to the log's end a wake: what is written after it sets the waker again (it
            # was cleared before the read), so no read more is owed before sleeping.
            while (events := await _fed(scan, deadline)) is not None:
                if run is not None:
                    run.feed(events)
                for ev in events:
                    if ev.kind == "P" and ev.prompt != shown_prompt:
                        prompt = True
                    elif ev.kind in ("C", "E", "H", "Q"):
                        prompt = False
                    elif ev.kind == "X":
                        exited = ev
                if not scan.behind:
                    break
            now = time.monotonic()
            if exited is not None or (run is not None and run.verdict == "exited"):
                status = exited.status if exited is not None else run.status if run is not None else None
                return self._outcome(
                    spec, scan, t0, run, met=False, gone=True, code=status, detail=_ended(status)
                )
            result = self._announced(spec, scan, run, now, prompt)
            if result is None and spec.program_idle and self._settled(spec, scan, now):
                if synced == scan.last_output:
                    result = True, "screen settled"
                elif now >= next_poll:
                    next_poll = now + poll_s
                    if not await _by(deadline, self.host.front_busy(pane)):
                        # What is in front is done, but what it printed last may still be on its
                        # way to the log (a remote host's mirror lags): settled only once the log,
                        # proven caught up, brought nothing new.
                        if await self._caught_up(pane, deadline):
                            synced = scan.last_output
                            continue
                        result = True, "screen settled"  # the host cannot prove it: as it looks
            if result is None:
                result = held
            if result is None and spec.kind in ("file", "noproc", "cpu", "foreground") and now >= next_poll:
                next_poll = now + poll_s
                ready = run is None or run.started is not None or run.verdict != "pending"
                if ready:
                    found, cpu_prev, seen_proc = await _by(
                        deadline, self._polled(pane, spec, run, now, cpu_prev, seen_proc)
                    )
                    # The result shows what was printed before the condition held: read on to
                    # the log proven caught up (a remote host's mirror lags its terminal).
                    if found is not None and await self._caught_up(pane, deadline):
                        held = found
                        continue
                    result = found
            if result is not None:
                met, detail = result
                return self._outcome(spec, scan, t0, run, met=met, detail=detail)
            if (
                on_lost is not None
                and run is not None
                and run.started is not None
                and run.verdict == "pending"
                and now - scan.last_output >= _LOST_QUIET_S
                and now >= next_lost
            ):
                next_lost = now + _LOST_QUIET_S
                try:
                    if await _by(deadline, on_lost()):
                        on_lost = None
                        continue
                except ShellReplaced as replaced:
                    on_lost = None  # nothing to install into: the program is not bash
                    # A run's end can never come now; what the output shows (``match``, ``settle``,
                    # a file) still may, from the program that took the shell's place.
                    if spec.kind in _RUN_END:
                        out = self._outcome(spec, scan, t0, run, met=False, detail=replaced.detail)
                        return replace(out, replaced_by=replaced.program)
            if now >= next_alive:
                next_alive = now + _ALIVE_S
                gone = await _by(deadline, self._gone(pane))
                if gone is not None:
                    return self._outcome(
                        spec, scan, t0, run, met=False, gone=True, code=gone[0], detail=gone[1]
                    )
            if now >= deadline or scan.overran is not None:
                why = f"timeout after {spec.timeout_ms} ms" if scan.overran is None else scan.overran
                return self._outcome(
                    spec, scan, t0, run, met=False, timed_out=True, detail=f"{why} (nothing was killed)"
                )
            sleep = min(deadline - now, max(0.0, next_alive - now))
            if spec.kind in ("file", "noproc", "cpu", "foreground"):
                sleep = min(sleep, max(0.0, next_poll - now))
            if on_lost is not None and run is not None and run.started is not None:
                sleep = min(sleep, max(0.005, max(next_lost, scan.last_output + _LOST_QUIET_S) - now))
            elif spec.program_idle and self._settled(spec, scan, now):
                sleep = min(sleep, max(0.0, next_poll - now))  # quiet: ask again whether it works
            elif spec.kind == "settle" or (spec.kind == "idle" and nonce is None):
                sleep = min(sleep, max(0.005, self._quiet(spec) - (now - scan.last_output)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(sleep, 0.001)):  # no task per wake, unlike wait_for
                    await waker.wait()

    async def _caught_up(self, pane: PaneInfo, deadline: float) -> bool:
        """The log holds everything the pane printed until now (``False``: not proven in time)."""
        within = min(_CAUGHT_UP_S, max(deadline - time.monotonic(), 0.01))
        try:
            return await _by(deadline, self.host.sync_log(pane, within=within))
        except _Overdue:
            return False  # not proven in time, as when the mark did not arrive

    @staticmethod
    def _quiet(spec: WaitSpec) -> float:
        return max(spec.poll_ms, 20) / 1000 if spec.kind == "settle" else _QUIET_S

    @staticmethod
    def _settled(spec: WaitSpec, scan: _Scan, now: float) -> bool:
        """A ``settle``'s screen has been quiet its ``poll_ms``."""
        return spec.kind == "settle" and now - scan.last_output >= WaitEngine._quiet(spec)

    def _announced(
        self, spec: WaitSpec, scan: _Scan, run: RunTrack | None, now: float, prompt: bool
    ) -> tuple[bool, str] | None:
        kind = spec.kind
        if kind == "none":
            return True, "returned at once (the command keeps running)"
        if run is not None and run.verdict in ("ended", "unparsed", "incomplete"):
            if run.verdict == "incomplete":
                return False, (
                    "the command line is incomplete: bash waits for more lines (PS2); send the rest "
                    "with shell_send, or cancel it with keys ['C-c']"
                )
            if kind in ("exit", "idle", "prompt"):
                note = "" if run.verdict == "ended" else " (bash could not run the line: a syntax error)"
                if kind == "exit" and spec.code is not None and run.status != spec.code:
                    return False, f"exit={run.status} ≠ expected {spec.code}{note}"
                return True, f"exit={run.status}{note}"
        if kind == "bell" and scan.bell:
            return True, "bell"
        if kind == "match" and scan.matched is not None:
            return True, f"matched {scan.matched[:80]!r}"
        quiet = now - scan.last_output
        if not spec.program_idle and self._settled(spec, scan, now):
            return True, "screen settled"
        if kind in ("idle", "prompt") and run is None:
            if scan.events is not None and prompt:
                return True, "idle at the prompt"
            if scan.events is None and quiet >= _QUIET_S:
                return True, "quiet"
        return None

    async def _polled(
        self,
        pane: PaneInfo,
        spec: WaitSpec,
        run: RunTrack | None,
        now: float,
        cpu_prev: tuple[float, float] | None,
        seen_proc: bool,
    ) -> tuple[tuple[bool, str] | None, tuple[float, float] | None, bool]:
        kind = spec.kind
        run_over = run is not None and run.verdict != "pending"
        if kind == "file" and spec.path is not None:
            hit = await self.host.exists(spec.path, pane)
            return ((True, f"file {spec.path} exists") if hit else None), cpu_prev, seen_proc
        if kind == "noproc" and spec.proc is not None:
            present = spec.proc[:15] in await self.host.tree_names(pane)
            seen_proc = seen_proc or present
            if not present and (seen_proc or run_over or run is None):
                why = (
                    f"no {spec.proc} in the pane"
                    if seen_proc or run is None
                    else (f"the run ended; {spec.proc} never appeared in the pane")
                )
                return (True, why), cpu_prev, seen_proc
            return None, cpu_prev, seen_proc
        if kind == "foreground" and spec.proc is not None:
            fg = await self.host.foreground(pane)
            hit = fg.command == spec.proc[:15]
            return ((True, f"foreground is {fg.command}") if hit else None), cpu_prev, seen_proc
        if kind == "cpu" and spec.threshold is not None:
            fg = await self.host.foreground(pane)
            if fg.shell_in_front or fg.pgid == 0:
                if run is not None and not run_over:
                    return None, None, seen_proc  # the run's process has not appeared yet
                return (True, "no foreground command (0% CPU)"), cpu_prev, seen_proc
            sample = (now, await self.host.group_cpu_seconds(pane, fg.pgid))
            if cpu_prev is None:
                return None, sample, True
            pct = 100.0 * (sample[1] - cpu_prev[1]) / max(sample[0] - cpu_prev[0], 1e-6)
            # Below the threshold, and nothing of it running or waiting to run (or for the disk)
            # now: a command the machine starves of CPU spends little between two samples (a
            # loaded machine may not run it at all for a while), yet it works.
            if pct < spec.threshold and not await self.host.front_busy(pane):
                return (True, f"foreground CPU {pct:.0f}% < {spec.threshold:g}%"), sample, True
            return None, sample, True
        return None, cpu_prev, seen_proc

    async def _gone(self, pane: PaneInfo) -> tuple[int | None, str] | None:
        """``(status, why)`` if the shell has ended, else ``None``."""
        if await self.host.alive(pane):
            return None
        try:
            fresh = await self.host.pane_now(pane.shell_id)
        except NotFoundError:
            return None, "the shell ended (its tmux session is gone; no exit status is known)"
        if fresh.dead or not await self.host.alive(fresh):
            return fresh.dead_status, _ended(fresh.dead_status)
        return None  # respawned: a new process runs in the same pane

    def _silent(
        self, spec: WaitSpec, scan: _Scan, t0: float, run: RunTrack | None, overdue: _Overdue
    ) -> WaitOutcome:
        """The wait's time ran out while the host owed it an answer: a timeout, as the log shows it
        (what the shell printed while the host was silent may not have arrived)."""
        silent = time.monotonic() - overdue.asked
        out = self._outcome(
            spec,
            scan,
            t0,
            run,
            met=False,
            timed_out=True,
            detail=(
                f"timeout after {spec.timeout_ms} ms (nothing was killed; host {self.host.name} had "
                f"not answered for {silent:.1f} s, so what the shell printed meanwhile may be missing "
                "here — shell_read shows it once the host answers)"
            ),
        )
        return replace(out, host_silent=True)

    @staticmethod
    def _outcome(
        spec: WaitSpec,
        scan: _Scan,
        t0: float,
        run: RunTrack | None,
        *,
        met: bool,
        detail: str,
        timed_out: bool = False,
        gone: bool = False,
        code: int | None = None,
    ) -> WaitOutcome:
        exit_code = code if gone else run.status if run is not None else None
        end = scan.pos
        if run is not None and run.ended is not None and run.verdict in ("ended", "unparsed"):
            end = run.ended.start
        return WaitOutcome(
            kind=spec.kind,
            met=met,
            timed_out=timed_out,
            exit_code=exit_code,
            elapsed_ms=int((time.monotonic() - t0) * 1000),
            detail=detail,
            begin_offset=run.output_start if run is not None else None,
            end_offset=end,
            shell_gone=gone,
            run_started=run is not None and run.started is not None,
            run_verdict=run.verdict if run is not None else "pending",
        )


def _ended(status: int | None) -> str:
    if status is None:
        return "the shell ended"
    if status > 128:
        return f"the shell ended (killed by signal {status - 128}, exit status {status})"
    return f"the shell ended with exit status {status}"


def _mtime(path: Path, now: float) -> float:
    try:
        age = max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        age = 3600.0
    return now - age
