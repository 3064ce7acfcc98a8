"""The output shapes of ``shell_run`` (``output.showing``) and ``shell_read`` (``read.mode``).

Invariant: every line returned here went through ``tether.shells.termtext`` (integration events
removed), rendered by a worker process (``offload``) when much of the log must be read; each
view updates the caller's read position so ``since`` and ``diff`` mean "since my last look" per
conversation, durably (a restarted process continues). A position is never left
inside an event the shell is still printing (``reading.safe_end``). ``history`` returns
``output.lines`` lines and, when older output exists, a first line saying how to read the page
before (``before=N``, also ``ReadView.before``): following it reads the whole log once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tether.errors import UsageError
from tether.shells import shaping
from tether.shells.domain import Shells
from tether.shells.host import ShellHost
from tether.shells.integration.events import EventScanner, ShellEvent
from tether.shells.logs import log_size, read_range
from tether.shells.offload import Unfinished, bounded, rendered
from tether.shells.reading import (
    Lines,
    clip_line,
    history_page,
    history_tail,
    search,
    settled_lines,
)
from tether.shells.requests import MAX_OUTPUT_LINES, Output, ReadAction
from tether.shells.shaping import SearchHit, SearchPage, cap_tail
from tether.shells.termtext import filter_screen
from tether.shells.tmux.commands import PaneInfo

_SCREEN_SHOWINGS = frozenset({"tail", "screen", "diff"})
# A search of the longest history (100 MB) with a plain pattern takes a few seconds here.
SEARCH_WITHIN_S = 60.0
_LAST_COMMAND_BACK = 4 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadView:
    lines: list[str]
    before: int | None = None  # history: the action.before of the previous page (None: no more)


def with_dropped(lines: Lines) -> list[str]:
    head = [f"[{lines.dropped} earlier lines dropped]"] if lines.dropped else []
    return [*head, *lines.lines]


def budget(shells: Shells) -> int:
    """The bytes one task's result may hold (``[sessions] result_max_bytes``; the configuration
    refuses less than 1 KiB)."""
    return shells.config.sessions.result_max_bytes


def fit(lines: list[str] | tuple[str, ...], max_bytes: int, *, keep: str = "tail") -> tuple[str, ...]:
    """``lines`` within ``max_bytes`` (the newest kept, or the first for ``keep="head"``), saying what
    was cut and how to read it: the shell's log stays complete."""
    total = sum(len(line.encode("utf-8", "replace")) + 1 for line in lines)
    if total <= max_bytes:
        return tuple(lines)
    ordered = list(lines) if keep == "head" else list(reversed(lines))
    out: list[str] = []
    used = 0
    room = max_bytes - 200  # the note itself
    for line in ordered:
        line = clip_line(line, room)
        size = len(line.encode("utf-8", "replace")) + 1
        if out and used + size > room:
            break
        out.append(line)
        used += size
    left = len(lines) - len(out)
    note = (
        f"[result cut to its {max_bytes}-byte budget ([sessions] result_max_bytes): {left} lines left out; "
        "the shell's log is complete: read more with shell_read mode=history, since or search]"
    )
    return (*out, note) if keep == "head" else (note, *reversed(out))


async def screen_lines(shells: Shells, host: ShellHost, pane: PaneInfo) -> list[str]:
    """The visible screen, vault values masked: it is also what ``diff`` stores in the database."""
    return shells.hooks.mask("\n".join(filter_screen(await host.capture(pane)))).split("\n")


async def tail_lines(host: ShellHost, pane: PaneInfo, n: int) -> list[str]:
    if n <= 0:
        return []
    return cap_tail(filter_screen(await host.capture(pane, history=n)), n)


async def diff_lines(shells: Shells, host: ShellHost, pane: PaneInfo, actor: str) -> list[str]:
    current = await screen_lines(shells, host, pane)
    previous = shells.records.read_position(pane.shell_id, actor)
    before = previous[1].split("\n") if previous is not None and previous[1] else None
    offset = previous[0] if previous is not None else log_size(host.log_of(pane.shell_id))
    shells.records.set_read_position(pane.shell_id, actor, offset, "\n".join(current))
    return shaping.diff_screens(before, current)


async def since_lines(shells: Shells, shell_id: str, actor: str) -> list[str]:
    """New output since this conversation last read (first read: the last 2000 lines)."""
    path = shells.log_of(shell_id)
    size = log_size(path)
    pos = shells.records.read_position(shell_id, actor)
    start = pos[0] if pos is not None else 0
    end, lines = await rendered(
        size - start, settled_lines, path, start, size, MAX_OUTPUT_LINES, max_bytes=budget(shells)
    )
    shells.records.set_read_position(shell_id, actor, end)
    return with_dropped(lines)


async def run_output(shells: Shells, shell_id: str, start: int, end: int, actor: str) -> Lines:
    """A write's output from the log (rendered by a worker process when it is long)."""
    path = shells.log_of(shell_id)
    end, lines = await rendered(
        end - start, settled_lines, path, start, end, MAX_OUTPUT_LINES, max_bytes=budget(shells)
    )
    shells.records.set_read_position(shell_id, actor, end)
    return lines


async def shaped(
    shells: Shells, host: ShellHost, pane: PaneInfo, output: Output, actor: str, start: int, end: int
) -> list[str]:
    """A finished (or timed-out) run's output in the task's ``output.showing`` shape."""
    showing = output.showing
    if showing == "tail":
        return await tail_lines(host, pane, output.lines)
    if showing == "screen":
        return await screen_lines(shells, host, pane)
    if showing == "diff":
        return await diff_lines(shells, host, pane, actor)
    path = host.log_of(pane.shell_id)
    _stop, lines = await rendered(
        end - start, settled_lines, path, start, end, MAX_OUTPUT_LINES, max_bytes=budget(shells)
    )
    if showing == "summary":
        return [*cap_tail(list(lines.lines), min(output.lines, 5)), f"[{lines.total} lines total]"]
    return with_dropped(lines)


async def search_view(shells: Shells, shell_id: str, action: ReadAction, limit: int) -> list[str]:
    assert action.regex is not None
    path = shells.log_of(shell_id)
    try:
        # The pattern is the caller's: in a worker, for a bounded time (``offload.bounded``).
        page = await bounded(
            SEARCH_WITHIN_S,
            search,
            path,
            action.regex,
            context=action.context,
            offset=action.match_offset,
            page=max(limit, 1),
            mask=shells.hooks.masking(),  # the mask as it is now, as a value a worker can hold
        )
    except Unfinished as exc:
        raise UsageError(
            f"read.search {action.search!r} did not finish on {log_size(path)} bytes of "
            f"{shell_id}'s output: {exc}; a pattern with nested quantifiers such as (a+)+ can take "
            "forever on one line: simplify it"
        ) from None
    hits = tuple(SearchHit(line=n, text=t, before=b, after=a) for n, t, b, a in page.hits)
    return shaping.render_search(SearchPage(total=page.total, offset=page.offset, hits=hits))


async def history_view(
    path_of_log: Path, shell_id: str, limit: int, before: int | None, where: str, max_bytes: int
) -> ReadView:
    size = log_size(path_of_log)
    if before is not None and before > size:
        raise UsageError(
            f"{where}.before: {before} is past the end of {shell_id}'s log ({size} bytes); "
            "pass the before=N a history read of this shell returned"
        )
    # The page leaves room for its own note (and a wait's), so the result's budget never cuts it:
    # a page cut by that budget would lose lines between it and the page before.
    page = await rendered(size, history_page, path_of_log, limit, before, max_bytes=max_bytes - 512)
    if not page.earlier:
        return ReadView(lines=list(page.lines))
    note = (
        f"[{page.earlier} earlier lines not shown; read them with "
        f'action {{ "kind": "read", "mode": "history", "before": {page.start} }}]'
    )
    return ReadView(lines=[note, *page.lines], before=page.start)


async def read_view(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    action: ReadAction,
    limit: int,
    actor: str,
    where: str = "action",
) -> ReadView:
    """``shell_read`` ``read``: the mode's view, or a search page when ``search`` is set."""
    shell_id = pane.shell_id
    if action.regex is not None:
        return ReadView(lines=await search_view(shells, shell_id, action, limit))
    mode = action.mode
    if mode == "history":
        log, lines = host.log_of(shell_id), min(limit, MAX_OUTPUT_LINES)
        return await history_view(log, shell_id, lines, action.before, where, budget(shells))
    if mode == "screen":
        return ReadView(lines=await screen_lines(shells, host, pane))
    if mode == "tail":
        return ReadView(lines=await tail_lines(host, pane, limit))
    if mode == "diff":
        return ReadView(lines=await diff_lines(shells, host, pane, actor))
    if mode == "since":
        return ReadView(lines=await since_lines(shells, shell_id, actor))
    log = host.log_of(shell_id)
    hist = await rendered(
        log_size(log), history_tail, log, min(limit, shaping.SUMMARY_LINES), max_bytes=budget(shells)
    )
    return ReadView(lines=[*hist.lines, f"[{hist.total} lines total]"])


# ---- the shell's own command history --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LastCommand:
    text: str
    status: int | None  # None: still running
    by: str = "person"  # the conversation (or panel, cli) whose run it was, else "person"


def last_command(shells: Shells, shell_id: str) -> LastCommand | None:
    """The latest command line the shell ran — by tether, a person or ``shell_send`` — from its own
    events: a run's start carries its token (the run record has the text); anyone else's is
    followed by the text bash's history holds."""
    nonce = shells.nonce_of(shell_id)
    if nonce is None:
        last = shells.records.last_run(shell_id)
        return (
            LastCommand(text=last.command, status=last.exit_code, by=last.actor) if last is not None else None
        )
    path = shells.log_of(shell_id)
    size = log_size(path)
    start = max(0, size - _LAST_COMMAND_BACK)
    events = EventScanner(nonce, start).feed(read_range(path, start, size))
    for i in range(len(events) - 1, -1, -1):
        if events[i].kind != "C":
            continue
        j = i
        while j > 0 and events[j - 1].kind == "C":  # the first command of one accepted line
            j -= 1
        return _command_at(shells, shell_id, events[j], events[i + 1 :])
    last = shells.records.last_run(shell_id)
    return LastCommand(text=last.command, status=last.exit_code, by=last.actor) if last is not None else None


def _command_at(
    shells: Shells, shell_id: str, start: ShellEvent, after: list[ShellEvent]
) -> LastCommand | None:
    status = next((e.status for e in after if e.kind == "P"), None)
    if start.token:
        run = shells.records.run_by_token(shell_id, start.token)
        if run is not None:
            return LastCommand(text=run.command, status=status, by=run.actor)
    text = next((e.text for e in after if e.kind == "H"), None)
    if text is None:
        return None
    return LastCommand(text=text, status=status)
