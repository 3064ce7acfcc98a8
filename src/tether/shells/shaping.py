"""Pure text shapes of a shell's output: tails, capped ``since``, screens, diffs, summaries, search.

Invariant: pure functions of their arguments (no tmux, no I/O, no clock). Whatever is cut is said:
a capped ``since``/``history`` starts with ``[N earlier lines dropped]``, a summary ends with
``[N lines total]``, a search page says where the next page starts.

API::

    shape(mode, lines, *, limit, previous=None) -> list[str]
        mode "tail"     last ``limit`` lines                         (buffer lines)
             "since"    everything new, capped at 2000 with a note   (new lines)
             "history"  the whole buffer, capped at 2000 with a note (buffer lines)
             "screen"   the visible screen, trailing blank rows cut  (screen rows)
             "diff"     unified diff previous → current screen       (screen rows + previous)
             "summary"  last min(limit, 5) lines + "[N lines total]" (buffer lines)
    cap_tail(lines, n) -> list[str];  cap_since(lines, n=2000) -> list[str]
    search_lines(lines, regex, *, context, offset, limit) -> SearchPage;  render_search(page) -> list[str]
    UNCHANGED = "unchanged"   (shell_read ifChanged when the screen did not change)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MAX_LINES = 2000
SUMMARY_LINES = 5
UNCHANGED = "unchanged"
Mode = Literal["tail", "since", "history", "screen", "diff", "summary"]


def cap_tail(lines: Sequence[str], n: int) -> list[str]:
    """The last ``n`` lines (none for ``n <= 0``)."""
    return list(lines[-n:]) if n > 0 else []


def cap_since(lines: Sequence[str], n: int = MAX_LINES) -> list[str]:
    """All of ``lines`` if they fit in ``n``; else the last ``n`` after a dropped-count line."""
    if len(lines) <= n:
        return list(lines)
    return [f"[{len(lines) - n} earlier lines dropped]", *cap_tail(lines, n)]


def trim_screen(rows: Sequence[str]) -> list[str]:
    """Screen rows without the blank rows tmux pads below the last output."""
    end = len(rows)
    while end and not rows[end - 1].strip():
        end -= 1
    return [row.rstrip() for row in rows[:end]]


def diff_screens(previous: Sequence[str] | None, current: Sequence[str]) -> list[str]:
    """Unified diff (``-``/``+``/`` `` lines, ``@@`` hunks) from ``previous`` to ``current``.

    ``previous=None`` (no earlier read) shows the whole screen as added; no change gives
    ``["(no change)"]``.
    """
    before = trim_screen(previous or [])
    after = trim_screen(current)
    if before == after:
        return ["(no change)"]
    diff = difflib.unified_diff(before, after, "previous", "current", n=2, lineterm="")
    return [line for line in diff if not line.startswith(("---", "+++"))]


def summarize(lines: Sequence[str], limit: int) -> list[str]:
    """The last few lines and the total: what a quick look at a long output needs."""
    return [*cap_tail(lines, min(limit, SUMMARY_LINES)), f"[{len(lines)} lines total]"]


def shape(
    mode: Mode, lines: Sequence[str], *, limit: int, previous: Sequence[str] | None = None
) -> list[str]:
    """Cut ``lines`` into ``mode``'s shape (see the module docstring for what ``lines`` is)."""
    if mode == "tail":
        return cap_tail(lines, limit)
    if mode in ("since", "history"):
        return cap_since(lines)
    if mode == "screen":
        return trim_screen(lines)
    if mode == "diff":
        return diff_screens(previous, lines)
    return summarize(lines, limit)


# ---- search -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchHit:
    """One matching line (1-based ``line`` number) and its context lines as (number, text)."""

    line: int
    text: str
    before: tuple[tuple[int, str], ...] = ()
    after: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchPage:
    total: int
    offset: int
    hits: tuple[SearchHit, ...]

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.hits)
        return end if end < self.total else None


def search_lines(
    lines: Sequence[str], regex: re.Pattern[str], *, context: int, offset: int, limit: int
) -> SearchPage:
    """Lines matching ``regex``: count them all, return hits ``offset`` .. ``offset + limit``."""
    matching = [i for i, line in enumerate(lines) if regex.search(line)]
    hits = tuple(
        SearchHit(
            line=i + 1,
            text=lines[i],
            before=tuple((j + 1, lines[j]) for j in range(max(0, i - context), i)),
            after=tuple((j + 1, lines[j]) for j in range(i + 1, min(len(lines), i + 1 + context))),
        )
        for i in matching[offset : offset + max(limit, 0)]
    )
    return SearchPage(total=len(matching), offset=offset, hits=hits)


def render_search(page: SearchPage) -> list[str]:
    """grep-style: ``12: match`` and ``11- context``, groups separated by ``--``.

    Windows that overlap or touch are merged, as grep does: a line shared by two hits' context is
    shown once, a hit inside another hit's context is shown as a hit (``:``), and ``--`` stands
    only between windows with a gap. Merging changes only the display: the page still holds
    exactly its hits, so the count and ``matchOffset`` stay exact.
    """
    nxt = page.next_offset
    more = f"; next: matchOffset={nxt}" if nxt is not None else "; no more"
    out = [f"{page.total} matches, {len(page.hits)} on this page, from {page.offset}{more}"]
    shown: dict[int, tuple[str, bool]] = {}
    for hit in page.hits:
        for n, text in (*hit.before, *hit.after):
            shown.setdefault(n, (text, False))
        shown[hit.line] = (hit.text, True)
    with_context = any(hit.before or hit.after for hit in page.hits)
    previous: int | None = None
    for n in sorted(shown):
        if with_context and previous is not None and n > previous + 1:
            out.append("--")
        text, is_hit = shown[n]
        out.append(f"{n}: {text}" if is_hit else f"{n}- {text}")
        previous = n
    return out
