"""What a shell is doing now, read from the last event it reported, and how one run went.

Invariant: a shell's phase is the phase its *last* own event left it in — nothing is inferred from
output timing:

    P → "prompt"        it reads its next line
    C → "running"       a command line runs
    E, H → "hooks"      it has ended; the prompt hooks (the user's PROMPT_COMMAND) run until P
    Q → "continuation"  bash waits for the rest of an unfinished line (PS2)
    X → "exited"        the shell is ending

A ``P`` repeating the last prompt's number is readline redrawing that prompt (after the loader set
the line, say): it changes nothing. ``typed`` is not an event: keys of a run were sent after the
last event, and the shell has not reported taking them yet (see ``Shells.activity``).

``RunTrack`` follows one typed run from the offset where its keys were sent: the first ``C`` with
its token starts it, the first ``P`` after that ends it; a new ``P`` without that ``C`` means bash
never ran the line (it could not parse it, status 2); ``Q`` first means the line is incomplete.
A track that ends ``at_exit`` (a wait for the command's exit) ends at the first ``E`` after its
``C`` that carries the line's status, without waiting for the prompt hooks: the command and its
output are over there, and the next command waits for the prompt anyway (``prompt.ready``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.shells.integration.events import EventScanner, ShellEvent
from tether.shells.logs import data_start, log_size, read_range

Phase = Literal["prompt", "typed", "running", "hooks", "continuation", "exited", "unknown"]
_BACK_STEPS = (8 * 1024, 256 * 1024, 4 << 20, 64 << 20)


@dataclass(frozen=True, slots=True, kw_only=True)
class Activity:
    phase: Phase
    event: ShellEvent | None  # the event that set the phase
    prompt: int = 0  # number of the last prompt shown (0: none seen)


def activity_of(events: list[ShellEvent], before: Activity | None = None) -> Activity:
    """The phase after ``events`` (in log order), starting from ``before``."""
    current = before if before is not None else Activity(phase="unknown", event=None)
    for ev in events:
        if ev.kind == "P":
            if current.phase == "prompt" and ev.prompt == current.prompt:
                continue  # a redraw of the same prompt
            current = Activity(phase="prompt", event=ev, prompt=ev.prompt)
        elif ev.kind == "C":
            current = Activity(phase="running", event=ev, prompt=current.prompt)
        elif ev.kind in ("E", "H"):
            current = Activity(phase="hooks", event=ev, prompt=current.prompt)
        elif ev.kind == "Q":
            current = Activity(phase="continuation", event=ev, prompt=current.prompt)
        elif ev.kind == "X":
            current = Activity(phase="exited", event=ev, prompt=current.prompt)
        # L (the reporter answered) changes nothing: the shell still reads the same line.
    return current


def last_activity(path: Path, nonce: str) -> tuple[Activity, EventScanner]:
    """The shell's phase from the end of its log, reading backwards only as far as needed, and a
    scanner that continues from the end (holding an event the shell is still printing there)."""
    size = log_size(path)
    first = data_start(path)
    for back in _BACK_STEPS:
        start = max(first, size - back)
        scanner = EventScanner(nonce, start)
        events = scanner.feed(read_range(path, start, size))
        if events or start <= first:
            return activity_of(events), scanner
    # A log with output but no event in its last 64 MiB: a command has been printing all along.
    return Activity(phase="running", event=None), scanner


Verdict = Literal["pending", "ended", "unparsed", "incomplete", "exited"]


@dataclass(slots=True, kw_only=True)
class RunTrack:
    """One run's events after its keys were sent (``feed`` them in order)."""

    token: int
    prompt_before: int  # the prompt number shown when the keys were sent
    at_exit: bool = False  # ends at the line's own end (E), not at the prompt after its hooks
    started: ShellEvent | None = None
    ended: ShellEvent | None = None
    verdict: Verdict = "pending"

    def feed(self, events: list[ShellEvent]) -> None:
        for ev in events:
            if self.verdict != "pending":
                return
            if ev.kind == "C" and self.started is None and ev.token == self.token:
                self.started = ev
            elif self.started is not None and (ev.kind == "P" or self._line_end(ev)):
                self.ended, self.verdict = ev, "ended"
            elif ev.kind == "P" and ev.prompt != self.prompt_before:
                self.ended, self.verdict = ev, "unparsed"
            elif ev.kind == "Q" and self.started is None:
                self.ended, self.verdict = ev, "incomplete"
            elif ev.kind == "X":
                self.ended, self.verdict = ev, "exited"

    def _line_end(self, ev: ShellEvent) -> bool:
        return self.at_exit and ev.kind == "E" and ev.status is not None

    @property
    def status(self) -> int | None:
        return self.ended.status if self.ended is not None and self.verdict != "incomplete" else None

    @property
    def output_start(self) -> int | None:
        return self.started.end if self.started is not None else None
