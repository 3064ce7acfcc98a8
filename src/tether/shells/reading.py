"""Read views of a shell: screen and tail from tmux, history/since/search from the full log.

Invariant: views that must be exact beyond tmux's scrollback (``history``, ``since``, ``search``,
``summary`` counts) come from the log by byte offset, rendered by ``termtext`` (so no marker or
wrapper text survives); ``screen`` and ``tail`` come from ``capture-pane`` (what a person sees),
filtered the same way. Big logs are processed in bounded chunks cut at newlines, so reading a
100 MB history never holds more than one chunk of rendered text plus the kept lines.

``history_page`` pages the whole retained log backwards by byte offset: a page is the rendered
lines of one byte range ``[start, end)`` cut at line starts, and the next (earlier) page ends
where this one starts, so following the cursor reads every line exactly once, however many
megabytes the log holds.
"""

from __future__ import annotations

import bisect
import os
import re
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tether.shells.logs import data_start, log_size, read_from, read_range
from tether.shells.termtext import render, render_text

CHUNK = 8 * 1024 * 1024

# The results are named tuples, not dataclasses: the render worker imports this module, and
# ``dataclasses`` (with the ``inspect``, ``ast`` and ``tokenize`` it loads) would be a tenth of the
# worker's memory.


class Lines(NamedTuple):
    lines: tuple[str, ...]
    total: int  # lines before the cap was applied
    dropped: int  # lines left out (the oldest)


def keep_last(lines: list[str], limit: int, max_bytes: int | None = None) -> Lines:
    kept = lines[-limit:] if limit > 0 else []
    if max_bytes is not None:
        kept = list(_within(kept, max_bytes))
    return Lines(lines=tuple(kept), total=len(lines), dropped=len(lines) - len(kept))


def clip_line(line: str, max_bytes: int) -> str:
    """A line longer than ``max_bytes`` (as UTF-8): its head and tail, and what was cut between."""
    if len(line) * 4 <= max_bytes or len(line.encode("utf-8", "replace")) <= max_bytes:
        return line
    keep = max(max_bytes // 8, 16)
    return f"{line[:keep]} …[{len(line) - 2 * keep} characters of this line cut]… {line[-keep:]}"


def _within(lines: list[str] | deque[str], max_bytes: int) -> deque[str]:
    """The newest lines whose text fits ``max_bytes``, each clipped to it first."""
    out: deque[str] = deque()
    used = 0
    for line in reversed(lines):
        line = clip_line(line, max_bytes)
        size = len(line.encode("utf-8", "replace")) + 1
        if out and used + size > max_bytes:
            break
        out.appendleft(line)
        used += size
    return out


def log_lines(path: Path, start: int, end: int | None, limit: int, *, max_bytes: int | None = None) -> Lines:
    """Rendered lines of ``[start, end)``, the last ``limit`` kept (and, with ``max_bytes``, only
    as many as fit that many bytes), the total counted exactly. Memory stays within one chunk plus
    what is kept, whatever the range holds (one 100 MB line included)."""
    end = log_size(path) if end is None else end
    start = max(start, data_start(path)) if start < end else start
    if end - start <= CHUNK:
        return keep_last(render(read_range(path, start, end)), limit, max_bytes)
    kept: deque[str] = deque(maxlen=max(limit, 0))
    total = 0
    chunks = _ChunkIter(path, start, end)
    for text in chunks:
        lines = text.split("\n")
        if chunks.continued and kept:
            # The previous chunk ended inside a line (no newline in a whole chunk): same line.
            lines[0] = kept.pop() + lines[0]
            total -= 1
        total += len(lines)
        if max_bytes is not None:
            lines = [clip_line(line, max_bytes) for line in lines[-limit:]] if limit > 0 else []
        kept.extend(lines)
        if max_bytes is not None:
            kept = deque(_within(kept, max_bytes), maxlen=max(limit, 0))
    if kept and kept[-1] == "":
        kept.pop()
        total -= 1
    return Lines(lines=tuple(kept), total=total, dropped=total - len(kept))


_OSC_OPEN = b"\x1b]"


def _open_osc(data: bytes) -> int:
    """Where an OSC string still unterminated at the end of ``data`` begins (-1: none)."""
    at = data.rfind(_OSC_OPEN)
    if at < 0 or b"\x07" in data[at:] or b"\x1b\\" in data[at:]:
        return -1
    return at


_EVENT_REACH = 65536  # how far back from a view's end ``safe_end`` looks for an event begun there


def safe_end(path: Path, end: int) -> int:
    """``end``, moved back to the start of an event the shell is still printing there (an event is
    several writes), so no view begins or ends inside one."""
    base, data = read_from(path, max(0, end - _EVENT_REACH), end)
    at = _open_osc(data)
    return end if at < 0 else base + at


def settled_lines(
    path: Path, start: int, end: int, limit: int, *, max_bytes: int | None = None
) -> tuple[int, Lines]:
    """``safe_end(path, end)`` and ``log_lines`` of ``[start, that end)``. A range within the
    stretch ``safe_end`` reads (a command's output, nearly always) is rendered from those very
    bytes: one open and read of the log instead of three."""
    reach = max(0, end - _EVENT_REACH)
    if start < reach:
        stop = safe_end(path, end)
        return stop, log_lines(path, start, stop, limit, max_bytes=max_bytes)
    base, data = read_from(path, reach, end)  # ``base``: past ``reach`` when the head was punched
    at = _open_osc(data)
    stop = end if at < 0 else base + at
    first = max(start, base)
    return stop, keep_last(render(data[first - base : stop - base]), limit, max_bytes)


class _ChunkIter:
    """Rendered text of a log range, one newline-aligned chunk at a time (no trailing ``\\n``)."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self.path, self.pos, self.end = path, start, end
        self.continued = False  # this chunk continues a line the previous one did not end
        self._open = False

    def __iter__(self) -> _ChunkIter:
        return self

    def __next__(self) -> str:
        if self.pos >= self.end:
            raise StopIteration
        stop = min(self.pos + CHUNK, self.end)
        data = read_range(self.path, self.pos, stop)
        if not data:
            raise StopIteration
        if stop < self.end:
            cut = data.rfind(b"\n")
            if cut > 0:
                data = data[: cut + 1]
            # Never cut inside an OSC string (an event with a multi-line command in it).
            at = _open_osc(data)
            if at > 0:
                data = data[:at]
        self.pos += len(data)
        self.continued, self._open = self._open, not data.endswith(b"\n")
        text = render_text(data)
        return text[:-1] if text.endswith("\n") else text


def history_tail(path: Path, limit: int, *, max_bytes: int | None = None) -> Lines:
    """The last ``limit`` lines of the whole retained log, with the total line count (with
    ``max_bytes``, only as many as fit: the tail rendered never needs more than a few times that)."""
    size = log_size(path)
    first = data_start(path)
    if size - first <= CHUNK:
        return keep_last(render(read_range(path, first, size)), limit, max_bytes)
    # Count every line (fast, in C) but render only a tail big enough for ``limit`` lines.
    newlines = 0
    with open(path, "rb") as fh:
        fh.seek(first)
        while block := fh.read(CHUNK):
            newlines += block.count(b"\n")
    back = min(size - first, max(65536, limit * 512))
    most = size - first if max_bytes is None else min(size - first, max(65536, 8 * max_bytes))
    while True:
        tail = render(read_range(path, size - back, size))
        if len(tail) > limit or back >= most:
            break
        back = min(most, back * 4)
    kept = tail[-limit:] if limit > 0 else []
    if max_bytes is not None:
        kept = list(_within(kept, max_bytes))
    total = max(newlines, len(kept))
    return Lines(lines=tuple(kept), total=total, dropped=total - len(kept))


class HistoryPage(NamedTuple):
    lines: tuple[str, ...]
    start: int  # log offset of the page's first line: the ``before`` of the page before it
    earlier: int  # log lines before ``start`` (0: the page reaches the oldest retained output)


def history_page(
    path: Path, limit: int, before: int | None = None, *, max_bytes: int | None = None
) -> HistoryPage:
    """The last ``limit`` rendered lines that end at offset ``before`` (default: the log's end);
    with ``max_bytes``, only the newest of them that fit (each clipped as ``clip_line`` does), the
    page then starting at the first line kept, so the cursor stays exact.
    """
    page = _history_page(path, limit, before)
    if max_bytes is None:
        return page
    fitting = len(_within(list(page.lines), max_bytes))
    if fitting < len(page.lines):
        page = _history_page(path, fitting, before)
    clipped = tuple(clip_line(line, max_bytes) for line in page.lines)
    return HistoryPage(lines=clipped, start=page.start, earlier=page.earlier)


def _history_page(path: Path, limit: int, before: int | None) -> HistoryPage:
    """The last ``limit`` rendered lines that end at offset ``before`` (default: the log's end).

    The range starts ``limit`` log lines back and grows by the lines rendering hid (tether's own
    events) until it renders ``limit`` lines or reaches the oldest retained byte; rendering
    never makes more lines than the log holds, so the page is exactly ``limit`` lines and its
    ``start`` is exact.
    """
    first = data_start(path)
    size = log_size(path)
    end = safe_end(path, size) if before is None else max(first, min(before, size))
    start, rendered, want = end, [], max(limit, 0)
    while want > 0 and start > first:
        start = _outside_event(path, _line_start_back(path, start, first, want), first)
        rendered = render(read_range(path, start, end))
        want = limit - len(rendered)
    return HistoryPage(lines=tuple(rendered), start=start, earlier=_count_newlines(path, first, start))


def _outside_event(path: Path, start: int, first: int) -> int:
    """``start``, or the start of the line holding the event it falls inside (an event's text,
    such as a typed command's history entry, may span lines)."""
    while start > first:
        window = max(first, start - 65536)
        at = _open_osc(read_range(path, window, start))
        if at < 0:
            return start
        start = _line_start_back(path, window + at + 1, first, 1)
    return start


def _line_start_back(path: Path, pos: int, first: int, n: int) -> int:
    """Offset of the start of the ``n``-th line that ends before ``pos`` (``first`` if fewer)."""
    with open(path, "rb") as fh:
        fh.seek(pos - 1)
        # The newline that ends the last line belongs to it; a partial last line has none.
        hi = pos - 1 if fh.read(1) == b"\n" else pos
        found = 0
        while hi > first:
            lo = max(first, hi - 65536)
            fh.seek(lo)
            block = fh.read(hi - lo)
            idx = len(block)
            while (k := block.rfind(b"\n", 0, idx)) >= 0:
                found += 1
                if found == n:
                    return lo + k + 1
                idx = k
            hi = lo
    return first


def _count_newlines(path: Path, start: int, end: int) -> int:
    count = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0 and (block := fh.read(min(CHUNK, left))):
            count += block.count(b"\n")
            left -= len(block)
    return count


Hit = tuple[int, str, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]


class SearchPage(NamedTuple):
    total: int  # matching lines in the whole log
    offset: int  # matches skipped (matchOffset)
    # (1-based line number, line, before-context, after-context); context as (number, line)
    hits: tuple[Hit, ...]
    next_offset: int | None  # matchOffset of the next page, None when this is the last


MASK_PROBE = "[vault:NAME]"  # what a masked value looks like (``vault.mask``)


def search(
    path: Path,
    regex: re.Pattern[str],
    *,
    context: int,
    offset: int,
    page: int,
    mask: Callable[[str], str] | None = None,
) -> SearchPage:
    """Lines of the log matching ``regex``: exact count, one page of hits with ``context`` lines.

    With ``mask``, the search runs on the masked text, so a pattern over a secret's value never
    matches and the count reveals nothing: a line the raw text matches counts only if its masked
    form matches too, and a pattern that could match the mask itself searches masked chunks."""
    whole = mask is not None and regex.search(MASK_PROBE) is not None
    # JS semantics (no m flag): ^ and $ anchor the subject, here one line. Unanchored patterns
    # run over a whole chunk at C speed; anchored ones line by line.
    anchored = any(a in regex.pattern for a in ("^", "\\Z", "\\A"))
    pattern = regex
    total = 0
    line_base = 0
    last_number = 0
    done: list[Hit] = []
    open_hits: list[tuple[int, str, list[tuple[int, str]], list[tuple[int, str]]]] = []
    prev_tail: list[str] = []
    chunks = _ChunkIter(path, data_start(path), log_size(path))
    for text in chunks:
        if chunks.continued:
            line_base -= 1  # the first line here is the one the previous chunk did not end
        if whole and mask is not None:
            text = mask(text)
        starts = _line_starts(text)
        lines: list[str] | None = None
        if open_hits:
            lines = text.split("\n")
            for number, line, before, after in open_hits:
                missing = context - len(after)
                after.extend((line_base + 1 + j, lines[j]) for j in range(min(missing, len(lines))))
                done.append((number, line, tuple(before), tuple(after)))
            open_hits = []
        if anchored:
            if lines is None:
                lines = text.split("\n")
            found = [i for i, line in enumerate(lines) if pattern.search(line)]
        else:
            found = [bisect.bisect_right(starts, m.start()) - 1 for m in pattern.finditer(text)]
        if mask is not None and not whole and found:
            if lines is None:
                lines = text.split("\n")
            found = [i for i in found if pattern.search(mask(lines[i]))]
        for idx in found:
            if line_base + idx + 1 == last_number:
                continue  # one line counts once (several hits in it, or split over two chunks)
            last_number = line_base + idx + 1
            total += 1
            if total <= offset or len(done) + len(open_hits) >= page:
                continue
            if lines is None:
                lines = text.split("\n")
            number = line_base + idx + 1
            joined = prev_tail + lines
            at = len(prev_tail) + idx
            before = [(number - at + j, joined[j]) for j in range(max(0, at - context), at)]
            after = [(number + 1 + j, lines[idx + 1 + j]) for j in range(min(context, len(lines) - 1 - idx))]
            open_hits.append((number, lines[idx], before, after))
        if context:
            if lines is None:
                lines = text.split("\n")
            prev_tail = lines[-context:]
        line_base += len(starts)
    done.extend((n, line, tuple(b), tuple(a)) for n, line, b, a in open_hits)
    shown = offset + len(done)
    return SearchPage(
        total=total, offset=offset, hits=tuple(done), next_offset=shown if shown < total else None
    )


def _line_starts(text: str) -> list[int]:
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def file_mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def match_lines(
    carry: str, data: bytes, regex: re.Pattern[str], mask: Callable[[str], str] | None
) -> tuple[str | None, str]:
    """The first match of ``regex`` in a line of ``carry`` + ``data`` rendered (masked first), and
    the unfinished last line to carry into the next piece. JS semantics: ^ and $ anchor the
    subject, so the pattern is tried line by line."""
    lines = (carry + render_text(data, keep_trailing=True)).split("\n")
    rest = lines[-1][-65536:]
    for line in lines:
        found = regex.search(mask(line) if mask is not None else line)
        if found is not None:
            return found.group(0), rest
    return None, rest
