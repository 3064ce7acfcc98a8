"""The output shapes of ``shell_run`` (``output.showing``) and ``shell_read`` (``read.mode``).

Invariant: every line returned here went through ``tether.shells.termtext`` (markers and the
wrapper's echo removed); each view updates the caller's read position so ``since`` and ``diff``
mean "since my last look" per conversation, durably (a restarted process continues).
"""

from __future__ import annotations

from tether.shells.engine import PaneInfo, SessionEngine
from tether.shells.logs import log_size
from tether.shells.reading import Lines, history_tail, log_lines, search
from tether.shells.termtext import filter_screen
from tether.tools import shell_render
from tether.tools.shell_args_model import MAX_OUTPUT_LINES, ReadAction
from tether.tools.shell_render import SearchHit, SearchPage


def with_dropped(lines: Lines) -> list[str]:
    head = [f"[{lines.dropped} earlier lines dropped]"] if lines.dropped else []
    return [*head, *lines.lines]


async def screen_lines(engine: SessionEngine, pane: PaneInfo) -> list[str]:
    """The visible screen, vault values masked: it is also what ``diff`` stores in the database."""
    return engine.hooks.mask("\n".join(filter_screen(await engine.capture(pane)))).split("\n")


async def tail_lines(engine: SessionEngine, pane: PaneInfo, n: int) -> list[str]:
    if n <= 0:
        return []
    return shell_render.cap_tail(filter_screen(await engine.capture(pane, history=n)), n)


async def diff_lines(engine: SessionEngine, pane: PaneInfo, actor: str) -> list[str]:
    current = await screen_lines(engine, pane)
    previous = engine.records.read_position(pane.shell_id, actor)
    before = previous[1].split("\n") if previous is not None and previous[1] else None
    offset = previous[0] if previous is not None else log_size(engine.log_of(pane.shell_id))
    engine.records.set_read_position(pane.shell_id, actor, offset, "\n".join(current))
    return shell_render.diff_screens(before, current)


def since_lines(engine: SessionEngine, shell_id: str, actor: str) -> list[str]:
    """New output since this conversation last read (first read: the last 2000 lines)."""
    path = engine.log_of(shell_id)
    end = log_size(path)
    pos = engine.records.read_position(shell_id, actor)
    start = pos[0] if pos is not None else 0
    lines = log_lines(path, start, end, MAX_OUTPUT_LINES)
    engine.records.set_read_position(shell_id, actor, end)
    return with_dropped(lines)


def run_output(engine: SessionEngine, shell_id: str, start: int, end: int, actor: str) -> Lines:
    lines = log_lines(engine.log_of(shell_id), start, end, MAX_OUTPUT_LINES)
    engine.records.set_read_position(shell_id, actor, end)
    return lines


def search_view(engine: SessionEngine, shell_id: str, action: ReadAction, limit: int) -> list[str]:
    assert action.regex is not None
    page = search(
        engine.log_of(shell_id),
        action.regex,
        context=action.context,
        offset=action.match_offset,
        page=max(limit, 1),
    )
    hits = tuple(SearchHit(line=n, text=t, before=b, after=a) for n, t, b, a in page.hits)
    return shell_render.render_search(SearchPage(total=page.total, offset=page.offset, hits=hits))


async def read_view(
    engine: SessionEngine, pane: PaneInfo, action: ReadAction, limit: int, actor: str
) -> list[str]:
    """``shell_read`` ``read``: the mode's view, or a search page when ``search`` is set."""
    shell_id = pane.shell_id
    if action.regex is not None:
        return search_view(engine, shell_id, action, limit)
    mode = action.mode
    if mode == "screen":
        return await screen_lines(engine, pane)
    if mode == "tail":
        return await tail_lines(engine, pane, limit)
    if mode == "diff":
        return await diff_lines(engine, pane, actor)
    if mode == "since":
        return since_lines(engine, shell_id, actor)
    if mode == "history":
        return with_dropped(history_tail(engine.log_of(shell_id), MAX_OUTPUT_LINES))
    hist = history_tail(engine.log_of(shell_id), min(limit, shell_render.SUMMARY_LINES))
    return [*hist.lines, f"[{hist.total} lines total]"]
