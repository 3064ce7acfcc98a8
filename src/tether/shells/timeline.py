"""A shell's command timeline: every command line it ran, by whom, when, and how it ended.

Invariant: the timeline is read from the shell's own events in its log (see ``integration``), so it
holds the commands people typed as well as tether's runs, with the times the shell itself stamped
(``$EPOCHREALTIME``); a run's text and author come from its record (matched by token), anyone
else's text from bash's history (the ``H`` event). Offsets let a viewer jump to a command's output:
``[output_start, output_end)`` of the log.

A command a person typed names its typist when a terminal of tether's noted who pressed Enter
(``people.note_enter``): the last one noted at a log offset between the prompt the line was typed
at (the last ``P`` before its ``C``) and the command's start. An Enter noted before that prompt
(in the previous command's program, or typed ahead) cannot have run the line, so a command typed at
a terminal tether does not see (``tmux attach``, the second line of a paste) has no typist rather
than a wrong one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from tether.shells.domain import Shells
from tether.shells.integration.events import EventScanner, ShellEvent
from tether.shells.logs import data_start, log_size, read_range

_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineEntry:
    text: str
    by: str  # a conversation id, "panel", "cli", or "person" (typed at a terminal)
    typist: str | None  # "person": who pressed Enter at the panel ("panel:alice", "panel"), if noted
    run_id: str | None
    started_at: float | None  # epoch seconds
    ended_at: float | None  # None while it runs
    exit_code: int | None
    output_start: int
    output_end: int | None


def _events(shells: Shells, shell_id: str, nonce: str) -> list[ShellEvent]:
    path = shells.log_of(shell_id)
    pos, end = data_start(path), log_size(path)
    scanner = EventScanner(nonce, pos)
    found: list[ShellEvent] = []
    while pos < end:
        chunk = read_range(path, pos, min(end, pos + _CHUNK))
        if not chunk:
            break
        pos += len(chunk)
        found.extend(e for e in scanner.feed(chunk) if e.kind in ("C", "P", "H", "X"))
    return found


def timeline(shells: Shells, shell_id: str, *, limit: int = 200) -> list[TimelineEntry]:
    """The last ``limit`` commands of the shell, oldest first."""
    nonce = shells.nonce_of(shell_id)
    if nonce is None:
        return []
    enters = shells.records.enters(shell_id)
    out: list[TimelineEntry] = []
    start: ShellEvent | None = None
    text: str | None = None
    typist: str | None = None
    prompt: int | None = None  # where the last prompt begins in the log (none read yet: no typist)
    for ev in _events(shells, shell_id, nonce):
        if ev.kind == "C" and start is None:
            start, text, typist = ev, None, _typist(enters, prompt, ev.start)
        elif ev.kind == "H" and start is not None:
            text = ev.text
        elif ev.kind in ("P", "X") and start is not None:
            out.append(_command(shells, shell_id, start, text, typist, ev))
            start = None
        if ev.kind == "P":
            prompt = ev.start
    if start is not None:
        out.append(_command(shells, shell_id, start, text, typist, None))
    return out[-limit:]


def _typist(enters: list[tuple[int, str]], prompt: int | None, start: int) -> str | None:
    """The last person noted pressing Enter in ``[prompt, start]`` of the log (see the module); a
    command whose prompt is not in the log (cut from its head) names nobody."""
    if prompt is None:
        return None
    i = bisect.bisect_right(enters, start, key=lambda e: e[0])
    return enters[i - 1][1] if i and enters[i - 1][0] >= prompt else None


def _command(
    shells: Shells,
    shell_id: str,
    start: ShellEvent,
    text: str | None,
    typist: str | None,
    end: ShellEvent | None,
) -> TimelineEntry:
    run = shells.records.run_by_token(shell_id, start.token) if start.token else None
    return TimelineEntry(
        text=run.command if run is not None else (text or ""),
        by=run.actor if run is not None else "person",
        typist=None if run is not None else typist,
        run_id=run.run_id if run is not None else None,
        started_at=start.at,
        ended_at=end.at if end is not None else None,
        exit_code=end.status if end is not None else None,
        output_start=start.end,
        output_end=end.start if end is not None else None,
    )
