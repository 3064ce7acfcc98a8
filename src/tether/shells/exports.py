"""A shell's output taken out whole: one command's output as text, everything as a recording.

Invariant: exports read the log (every byte the pane printed, by offset) and never contain a vault
value: ``command_output`` is rendered text the tool layer masks like any result, and ``asciicast``
masks the stream itself, before it is cut into timed events (``TimedStreamMasker``: a value split
across two events is still caught, and the text it holds back keeps its own time), because no
later pass could see across the cut. The shell's
integration events (nonce and all) are removed from a recording; every other byte is kept, so a
player draws exactly what a terminal drew.

A recording is asciicast v2 (header line, then ``[time, "o", text]`` events, and an ``"m"``
marker at each command's start labelled with its text). Times come from the log's samples
(``timing``) and the exact times of the shell's own events; a byte gets the earliest time known
for any point at or after it, so times never decrease and never come before the byte was printed.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import heapq
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from tether.shells.domain import Shells
from tether.shells.integration.events import ANY_MARKER_RE, EventScanner
from tether.shells.logs import data_start, log_size, read_range
from tether.shells.reading import Lines, log_lines, safe_end
from tether.shells.timeline import timeline
from tether.shells.timing import read_samples, times_path
from tether.shells.vault.mask import SecretMasker, TimedStreamMasker

_PIECE = 1 << 20
_OPEN = b"\x1b]6973;"
_MAX_EVENTS_OPEN = 1 << 20


def command_output(shells: Shells, shell_id: str, start: int, end: int | None, limit: int) -> Lines:
    """The rendered text of log bytes ``[start, end)`` (a command's output), the last ``limit``
    lines kept; ``end=None``: up to what the shell has printed so far."""
    path = shells.log_of(shell_id)
    stop = safe_end(path, log_size(path) if end is None else min(end, log_size(path)))
    return log_lines(path, max(0, start), stop, limit)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    text: str  # the asciicast v2 file
    events: int
    duration_s: float
    bytes: int  # log bytes covered


def _anchors(shells: Shells, shell_id: str, first: int, end: int) -> tuple[list[int], list[float]]:
    """Offsets and the earliest time known at or after each (suffix minimum, so non-decreasing)."""
    path = shells.log_of(shell_id)
    points = [(o, t) for o, t in read_samples(times_path(path.parent, shell_id)) if o > first]
    nonce = shells.nonce_of(shell_id)
    if nonce is not None:
        scanner = EventScanner(nonce, first)
        pos = first
        while pos < end:
            chunk = read_range(path, pos, min(end, pos + 8 * _PIECE))
            if not chunk:
                break
            pos += len(chunk)
            points.extend((e.end, e.at) for e in scanner.feed(chunk) if e.at is not None)
    points.sort()
    # The last write: every byte is older. The kernel stamps it with a coarse clock (a tick behind
    # the shell's own times), so it only times what no sample or event after it covers.
    with contextlib.suppress(FileNotFoundError):
        last = max((t for _o, t in points), default=0.0)
        points.append((end, max(last, os.stat(path).st_mtime)))
    offsets = [o for o, _t in points]
    times = [t for _o, t in points]
    for i in range(len(times) - 2, -1, -1):
        times[i] = min(times[i], times[i + 1])
    return offsets, times


class _Stripper:
    """Removes integration events from a byte stream cut at any point (an open one is held back)."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._carry + data
        cut = len(buf)
        tail = buf.rfind(_OPEN, max(0, len(buf) - _MAX_EVENTS_OPEN))
        if tail >= 0 and b"\x07" not in buf[tail:] and b"\x1b\\" not in buf[tail:]:
            cut = tail
        else:
            for n in range(len(_OPEN) - 1, 0, -1):
                if buf.endswith(_OPEN[:n]):
                    cut = len(buf) - n
                    break
        self._carry = buf[cut:]
        return ANY_MARKER_RE.sub(b"", buf[:cut])

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return ANY_MARKER_RE.sub(b"", rest)


def _pieces(
    path_end: int, offsets: list[int], times: list[float], first: int
) -> Iterator[tuple[int, int, float]]:
    """``(start, end, time)`` of every stretch of the log that shares one time."""
    pos = first
    while pos < path_end:
        i = bisect.bisect_right(offsets, pos)
        stop = offsets[i] if i < len(offsets) else path_end
        at = times[i] if i < len(times) else (times[-1] if times else 0.0)
        stop = min(max(stop, pos + 1), path_end, pos + _PIECE)
        yield pos, stop, at
        pos = stop


def asciicast(
    shells: Shells,
    shell_id: str,
    *,
    masker: SecretMasker,
    width: int,
    height: int,
    title: str,
) -> Recording:
    """The shell's whole retained output as an asciicast v2 recording (see the module docstring)."""
    path = shells.log_of(shell_id)
    first = data_start(path)
    end = safe_end(path, log_size(path))
    offsets, times = _anchors(shells, shell_id, first, end)
    rec = shells.record(shell_id)
    start_t = min([*times[:1], *([rec.created_ms / 1000] if rec is not None else [])], default=0.0)
    header = {
        "version": 2,
        "width": max(1, width),
        "height": max(1, height),
        "timestamp": int(start_t),
        "title": masker.mask(title) if masker else title,
        "env": {"TERM": "xterm-256color", "SHELL": "/bin/bash"},
    }
    out = _CastWriter(header=header, start=start_t, masker=masker)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stream = TimedStreamMasker(masker)
    stripper = _Stripper()
    # A marker per command anyone ran (a line without text that was no run is tether's own
    # re-install of the integration, which removes itself from history).
    marks = sorted(
        (e.started_at, e.text)
        for e in timeline(shells, shell_id, limit=100_000)
        if e.started_at is not None and (e.text or e.run_id)
    )
    parts: list[tuple[float, str]] = []
    for lo, hi, at in _pieces(end, offsets, times, first):
        parts.extend(stream.feed(decoder.decode(stripper.feed(read_range(path, lo, hi))), at))
    tail = decoder.decode(stripper.flush(), final=True)
    parts.extend(stream.feed(tail, times[-1] if times else start_t))
    parts.extend(stream.flush())
    # The masker releases text late (it holds a tail back until it knows no secret starts there),
    # with the text's own times: markers are merged in by time, output first when times tie.
    merged = heapq.merge(
        ((when, 0, text) for when, text in parts), ((when, 1, label) for when, label in marks)
    )
    for when, kind, text in merged:
        if kind == 0:
            out.output(when, text)
        else:
            out.mark(when, text)
    return Recording(text=out.text(), events=out.events, duration_s=out.last, bytes=end - first)


class _CastWriter:
    """asciicast v2 lines with times that never decrease."""

    def __init__(self, *, header: dict[str, object], start: float, masker: SecretMasker) -> None:
        self._lines = [json.dumps(header, ensure_ascii=False)]
        self._start = start
        self._masker = masker
        self.events = 0
        self.last = 0.0

    def _at(self, when: float) -> float:
        self.last = max(self.last, round(when - self._start, 6))
        return self.last

    def output(self, when: float, text: str) -> None:
        if text:
            self._lines.append(json.dumps([self._at(when), "o", text], ensure_ascii=False))
            self.events += 1

    def mark(self, when: float, label: str) -> None:
        shown = self._masker.mask(label) if self._masker else label
        self._lines.append(json.dumps([self._at(when), "m", shown[:200]], ensure_ascii=False))

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
