"""Reading the audit log back for ``shell_audit`` and ``tether audit show``: filtered, newest last.

Invariant: a query reads day files from the newest backwards, each from its end, and stops as soon
as it holds ``limit`` matching records or passes the start of the window — so the cost follows
what is asked for, not the size of the log. Only complete lines are read (a line being written is
not yet a record); a line that is not a record is skipped here and reported by ``verify``.

A filter on actor, source or shell has a byte form every matching line must contain (records are
canonical JSON: ``"actor":"conv-a"``), so a query that matches few records — the one that would
read the whole log — searches the mapped file for that needle at memory speed and parses only the
lines around its hits (``_needle_lines``), instead of decoding every record.

``days`` is a rolling window: records whose time is within the last ``days`` × 24 hours.
``day`` instead selects one UTC calendar day's file whole.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from tether.audit.lines import complete_end, iter_lines_reverse
from tether.audit.record import (
    SOURCES,
    AuditError,
    AuditRecord,
    RecordProblem,
    day_of,
    list_day_files,
    parse_object,
)
from tether.errors import UsageError

MAX_DAYS = 3650
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFilter:
    """What a query keeps; ``None`` means "any"."""

    actor: str | None = None
    source: str | None = None
    shell: str | None = None
    since_ms: int | None = None

    def keeps(self, record: AuditRecord) -> bool:
        if self.actor is not None and record.actor != self.actor:
            return False
        if self.source is not None and record.source != self.source:
            return False
        if self.shell is not None and self.shell not in record.targets:
            return False
        return self.since_ms is None or record.ts >= self.since_ms


def query(
    home: Path,
    *,
    actor: str | None = None,
    source: str | None = None,
    days: int = 1,
    limit: int = 20,
    shell: str | None = None,
    day: date | str | None = None,
    clock: Callable[[], float] = time.time,
) -> list[AuditRecord]:
    """The newest ``limit`` records matching every given filter, oldest first (newest last)."""
    return [record for _line, record in _select(home, actor, source, days, limit, shell, day, clock)]


def export(
    home: Path,
    *,
    actor: str | None = None,
    source: str | None = None,
    days: int = 1,
    limit: int = 20,
    shell: str | None = None,
    day: date | str | None = None,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Like ``query`` but the raw JSONL lines exactly as stored (without newlines), newest last."""
    return [line for line, _record in _select(home, actor, source, days, limit, shell, day, clock)]


def _select(
    home: Path,
    actor: str | None,
    source: str | None,
    days: int,
    limit: int,
    shell: str | None,
    day: date | str | None,
    clock: Callable[[], float],
) -> list[tuple[str, AuditRecord]]:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise UsageError(f"audit days must be a whole number from 1 to {MAX_DAYS}; got {days!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"audit limit must be a whole number of at least 1; got {limit!r}")
    if source is not None and source not in SOURCES:
        raise UsageError(f"audit source {source!r} is not allowed; use one of {', '.join(SOURCES)}")
    files = list_day_files(home / "audit")
    if day is not None:
        wanted = _parse_day(day)
        files = [p for p in files if day_of(p.name) == wanted]
        since_ms = None
    else:
        since_ms = int(clock() * 1000) - days * DAY_MS
        first_day = datetime.fromtimestamp(since_ms / 1000, tz=UTC).date()
        files = [p for p in files if (d := day_of(p.name)) is not None and d >= first_day]
    keep = AuditFilter(actor=actor, source=source, shell=shell, since_ms=since_ms)
    needle = _needle(keep)
    found: list[tuple[str, AuditRecord]] = []
    for path in reversed(files):
        # closing(): stopping early must close the file now, not whenever the generator is collected.
        with closing(_records_reverse(path, needle)) as records:
            for line, record in records:
                if keep.keeps(record):
                    found.append((line, record))
                    if len(found) == limit:
                        return found[::-1]
    return found[::-1]


def _needle(keep: AuditFilter) -> bytes | None:
    """Bytes every line the filter keeps contains (the most selective field given), or None."""
    if keep.actor is not None:
        return b'"actor":' + json.dumps(keep.actor).encode("ascii")
    if keep.shell is not None:
        return json.dumps(keep.shell).encode("ascii")  # one of the "targets"
    if keep.source is not None:
        return b'"source":' + json.dumps(keep.source).encode("ascii")
    return None


def _needle_lines(fd: int, end: int, needle: bytes) -> Iterator[bytes]:
    """The complete lines before ``end`` that contain ``needle``, newest first."""
    if end == 0:
        return
    with mmap.mmap(fd, end, access=mmap.ACCESS_READ) as view:
        limit = end
        while (hit := view.rfind(needle, 0, limit)) >= 0:
            start = view.rfind(b"\n", 0, hit) + 1
            stop = view.find(b"\n", hit)
            yield view[start:stop]
            limit = start


def _records_reverse(
    path: Path, needle: bytes | None = None
) -> Generator[tuple[str, AuditRecord], None, None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise AuditError(f"cannot read the audit file {path}: {exc}; check its permissions") from exc
    try:
        end = complete_end(fd, os.fstat(fd).st_size)
        lines = (
            (raw for _offset, raw in iter_lines_reverse(fd, end))
            if needle is None
            else _needle_lines(fd, end, needle)
        )
        for raw in lines:
            try:
                record = AuditRecord.from_dict(parse_object(raw))
            except RecordProblem:
                continue
            yield raw.decode("ascii"), record
    except OSError as exc:
        raise AuditError(
            f"cannot read the audit file {path}: {exc}; check that it is a readable file"
        ) from exc
    finally:
        os.close(fd)


def _parse_day(day: date | str) -> date:
    if isinstance(day, date):
        return day
    try:
        return date.fromisoformat(day)
    except ValueError as exc:
        raise UsageError(f"audit day {day!r} is not a date; write it as YYYY-MM-DD, e.g. 2026-11-30") from exc
