"""The wait engine: block until a condition holds in a shell, or report that it did not in time.

Invariant: output conditions (``idle`` after a run, ``bell``, ``match``, ``exit``, ``settle``) are
decided from the bytes the log receives, woken by inotify — never by polling tmux; only conditions
that no output announces (``file``, ``noproc``, ``cpu``, ``foreground``, and a bare ``idle`` that
needs a quiet pane) are re-checked every ``poll_ms``. A timeout is a result (``timed_out``), never a
kill; ``exit`` with an expected ``code`` returns as soon as the status is known, met or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from tether.shells import procinfo
from tether.shells.logs import LogWatcher
from tether.shells.termtext import MARKER_RE, has_bell, render_text

_QUIET_S = 0.05  # a pane counts as quiet this long after its last byte (bare idle)
_FALLBACK_S = 0.5  # back at the prompt this long without an end marker: the run ended unreported
_ALIVE_S = 1.0  # how often a sleeping wait re-checks that the shell still exists
_SCAN_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSpec:
    kind: str  # none | idle | bell | match | exit | file | noproc | cpu | foreground | settle
    timeout_ms: int = 30_000
    poll_ms: int = 150
    code: int | None = None
    regex: re.Pattern[str] | None = None
    path: str | None = None
    proc: str | None = None
    threshold: float | None = None
    nonce: str | None = None  # the run whose markers bound the output (shell_run, exit/idle)


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitOutcome:
    kind: str
    met: bool
    timed_out: bool = False
    exit_code: int | None = None
    elapsed_ms: int = 0
    detail: str = ""
    begin_offset: int | None = None  # where the run's own output starts (after its begin marker)
    end_offset: int = 0  # where the run's output ends (its end marker), else the log end seen
    shell_gone: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PaneRef:
    shell_id: str
    pid: int
    tty: str
    log: Path


class _Scanner:
    """Reads a log forward from an offset and notes markers, bells and regex matches."""

    def __init__(self, path: Path, start: int, spec: WaitSpec) -> None:
        self.path, self.pos, self.spec = path, start, spec
        self.begin: int | None = None if spec.nonce else start
        self.exit_code: int | None = None
        self.end: int | None = None
        self.bell = False
        self.matched: str | None = None
        self._carry = b""
        self._text = ""
        self._seen = start  # bell/match have looked at everything before this offset
        try:
            age = max(0.0, time.time() - os.stat(path).st_mtime)
        except OSError:
            age = 3600.0
        # A settle measures quiet from the moment the keys were sent, not from older output.
        self.last_output = time.monotonic() - (0.0 if spec.kind == "settle" else age)

    def feed(self) -> bool:
        """Read what is new; ``True`` if anything was."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.pos)
                data = fh.read(_SCAN_CHUNK)
        except FileNotFoundError:
            return False
        if not data:
            return False
        self.last_output = time.monotonic()
        base = self.pos - len(self._carry)
        buf = self._carry + data
        self.pos += len(data)
        scan_from = 0
        if self.spec.nonce:
            for m in MARKER_RE.finditer(buf):
                nonce = m.group(1).decode()
                if nonce not in (self.spec.nonce, "*"):
                    continue
                if m.group(2) == b"b" and self.begin is None and nonce == self.spec.nonce:
                    self.begin = base + m.end()
                    scan_from = m.end()
                elif m.group(3) is not None and self.begin is not None and self.exit_code is None:
                    self.exit_code = int(m.group(3))
                    self.end = base + m.start()
        if self.begin is not None:
            start = max(scan_from, self.begin - base, self._seen - base)
            stop = len(buf) if self.end is None else self.end - base
            fresh = buf[start:stop] if stop > start else b""
            self._seen = max(self._seen, base + stop)
            if self.spec.kind == "bell" and has_bell(fresh):
                self.bell = True
            if self.spec.kind == "match" and self.spec.regex is not None and self.matched is None and fresh:
                # JS semantics: ^ and $ anchor the subject, so the pattern is tried line by line.
                lines = (self._text + render_text(fresh, keep_trailing=True)).split("\n")
                self._text = lines[-1][-65536:]
                for line in lines:
                    m2 = self.spec.regex.search(line)
                    if m2 is not None:
                        self.matched = m2.group(0)
                        break
        # Keep a tail so a marker split across two reads is still found.
        self._carry = buf[-64:] if b"\x1b" in buf[-64:] else b""
        return True


class WaitEngine:
    """Runs one ``WaitSpec`` against one pane."""

    def __init__(self, watcher: LogWatcher) -> None:
        self.watcher = watcher

    async def wait(self, pane: PaneRef, spec: WaitSpec, start: int) -> WaitOutcome:
        t0 = time.monotonic()
        waker = self.watcher.waker(pane.shell_id)
        try:
            return await self._loop(pane, spec, start, waker, t0)
        finally:
            self.watcher.drop(pane.shell_id, waker)

    async def _loop(
        self, pane: PaneRef, spec: WaitSpec, start: int, waker: asyncio.Event, t0: float
    ) -> WaitOutcome:
        sc = _Scanner(pane.log, start, spec)
        deadline = t0 + spec.timeout_ms / 1000
        poll_s = max(spec.poll_ms, 20) / 1000
        next_poll = t0
        cpu_prev: tuple[float, float] | None = None
        while True:
            waker.clear()
            while sc.feed():
                pass
            now = time.monotonic()
            result = self._output_condition(pane, spec, sc, now)
            if result is None and now >= next_poll:
                next_poll = now + poll_s
                result, cpu_prev = self._polled_condition(pane, spec, sc, now, cpu_prev)
            if result is not None:
                met, detail = result
                return self._outcome(spec, sc, t0, met=met, detail=detail)
            if not procinfo.alive(pane.pid):
                return self._outcome(spec, sc, t0, met=False, detail="the shell ended", gone=True)
            if now >= deadline:
                return self._outcome(
                    spec,
                    sc,
                    t0,
                    met=False,
                    timed_out=True,
                    detail=f"timeout after {spec.timeout_ms} ms (nothing was killed)",
                )
            sleep = min(deadline - now, _ALIVE_S)
            if spec.kind in ("file", "noproc", "cpu", "foreground"):
                sleep = min(sleep, max(0.0, next_poll - now))
            elif spec.kind in ("idle", "settle", "exit"):
                sleep = min(sleep, max(0.005, self._quiet_needed(spec) - (now - sc.last_output)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waker.wait(), timeout=max(sleep, 0.001))

    @staticmethod
    def _quiet_needed(spec: WaitSpec) -> float:
        if spec.kind == "settle":
            return max(spec.poll_ms, 20) / 1000
        return _FALLBACK_S if spec.nonce else _QUIET_S

    def _output_condition(
        self, pane: PaneRef, spec: WaitSpec, sc: _Scanner, now: float
    ) -> tuple[bool, str] | None:
        kind = spec.kind
        if kind == "none":
            return True, "returned at once (the command keeps running)"
        if spec.nonce and sc.exit_code is not None and kind in ("exit", "idle"):
            if kind == "exit" and spec.code is not None and sc.exit_code != spec.code:
                return False, f"exit={sc.exit_code} ≠ expected {spec.code}"
            return True, f"exit={sc.exit_code}"
        if kind == "bell" and sc.bell:
            return True, "bell"
        if kind == "match" and sc.matched is not None:
            return True, f"matched {sc.matched[:80]!r}"
        quiet = now - sc.last_output
        if kind == "settle" and quiet >= max(spec.poll_ms, 20) / 1000:
            return True, "screen settled"
        if kind in ("idle", "exit") and quiet >= self._quiet_needed(spec):
            if spec.nonce and sc.begin is None:
                return None  # the shell has not read the command yet
            if procinfo.at_prompt(pane.pid, pane.tty):
                if kind == "idle":
                    return True, "idle at the prompt"
                return False, "the shell is back at its prompt but the command reported no exit status"
        return None

    def _polled_condition(
        self, pane: PaneRef, spec: WaitSpec, sc: _Scanner, now: float, cpu_prev: tuple[float, float] | None
    ) -> tuple[tuple[bool, str] | None, tuple[float, float] | None]:
        kind = spec.kind
        if kind == "file" and spec.path is not None:
            path = os.path.expanduser(spec.path)
            return ((True, f"file {spec.path} exists") if os.path.exists(path) else None), cpu_prev
        if kind == "noproc" and spec.proc is not None:
            names = procinfo.tree_names(pane.pid)
            return ((True, f"no {spec.proc} in the pane") if spec.proc[:15] not in names else None), cpu_prev
        if kind == "foreground" and spec.proc is not None:
            fg = procinfo.foreground(pane.pid)
            return ((True, f"foreground is {fg.command}") if fg.command == spec.proc[:15] else None), cpu_prev
        if kind == "cpu" and spec.threshold is not None:
            fg = procinfo.foreground(pane.pid)
            if fg.shell_in_front or fg.pgid == 0:
                return (True, "no foreground command (0% CPU)"), cpu_prev
            sample = (now, procinfo.group_cpu_seconds(pane.pid, fg.pgid))
            if cpu_prev is None:
                return None, sample
            pct = 100.0 * (sample[1] - cpu_prev[1]) / max(sample[0] - cpu_prev[0], 1e-6)
            if pct < spec.threshold:
                return (True, f"foreground CPU {pct:.0f}% < {spec.threshold:g}%"), sample
            return None, sample
        return None, cpu_prev

    @staticmethod
    def _outcome(
        spec: WaitSpec,
        sc: _Scanner,
        t0: float,
        *,
        met: bool,
        detail: str,
        timed_out: bool = False,
        gone: bool = False,
    ) -> WaitOutcome:
        return WaitOutcome(
            kind=spec.kind,
            met=met,
            timed_out=timed_out,
            exit_code=sc.exit_code,
            elapsed_ms=int((time.monotonic() - t0) * 1000),
            detail=detail,
            begin_offset=sc.begin,
            end_offset=sc.end if sc.end is not None else sc.pos,
            shell_gone=gone,
        )
