"""Following a shell's new output as it arrives (what subscriptions forward).

Invariant: ``follow`` wakes on the shell's log growing (inotify, no polling), coalesces bursts for
``BATCH_S``, and yields rendered lines (events removed) in order, each byte once; a partial last
line is held until it ends or ``HOLD_S`` of quiet, so a masker sees a value printed in two writes
whole. It ends when the shell ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tether.shells.domain import Shells
from tether.shells.logs import log_size, read_range
from tether.shells.reading import safe_end
from tether.shells.termtext import render

BATCH_S = 0.05
HOLD_S = 1.0


def position(shells: Shells, shell_id: str) -> int:
    """Where following from now begins."""
    return log_size(shells.log_of(shell_id))


async def follow(shells: Shells, shell_id: str, pos: int) -> AsyncIterator[list[str]]:
    """New output lines of the shell from log offset ``pos``; returns when the shell ends."""
    host, pane = await shells.pane(shell_id)
    waker = host.watcher.waker(shell_id)
    path = host.log_of(shell_id)
    try:
        held = False
        while True:
            waker.clear()
            quiet = False
            try:
                await asyncio.wait_for(waker.wait(), timeout=HOLD_S if held else 5.0)
            except TimeoutError:
                quiet = True
            if not await host.alive(pane):
                return
            await asyncio.sleep(BATCH_S)  # coalesce a burst of writes into one message
            end = safe_end(path, log_size(path))
            if end <= pos:
                continue
            raw = read_range(path, pos, end)
            # A line still being written is held back (until it ends, or HOLD_S of quiet).
            cut = len(raw) if quiet else raw.rfind(b"\n") + 1
            held = cut < len(raw)
            if cut == 0:
                continue
            pos += cut
            lines = render(raw[:cut])
            if lines:
                yield lines
    finally:
        host.watcher.drop(shell_id, waker)
