"""Subscriptions: new output of a shell pushed to a conversation as MCP notifications.

Invariant: at most one forwarding task per (conversation, shell) in a process; it wakes on the
shell's log growing (inotify, no polling), coalesces bursts for ``BATCH_S``, and sends
``notifications/resources/updated`` for ``tether://shell/<id>`` plus a log message carrying the new
lines (rendered, markers removed, at most ``MAX_LINES`` per message); a partial last line waits
for its end or ``HOLD_S`` of quiet, so the masker (``tools.audited.MaskingNotifier``) sees it
whole. It ends on ``unsubscribe``, when the shell ends, when the notifier fails (the
conversation went away), or on ``close``.

``ShellResources`` publishes one readable resource per live shell: its current screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tether.errors import NotFoundError
from tether.shells import procinfo
from tether.shells.engine import SessionEngine
from tether.shells.logs import log_size, read_range
from tether.shells.termtext import filter_screen, render
from tether.tools.registry import CallContext, Notifier, ResourceInfo

logger = logging.getLogger(__name__)

URI_PREFIX = "tether://shell/"
BATCH_S = 0.05
HOLD_S = 1.0
MAX_LINES = 200


def shell_uri(shell_id: str) -> str:
    return URI_PREFIX + shell_id


class Subscriptions:
    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def active(self, actor: str, shell_id: str) -> bool:
        task = self._tasks.get((actor, shell_id))
        return task is not None and not task.done()

    def subscribe(self, engine: SessionEngine, actor: str, shell_id: str, notifier: Notifier) -> bool:
        """Start forwarding; ``False`` if this conversation already subscribed (idempotent)."""
        if self.active(actor, shell_id):
            return False
        start = log_size(engine.log_of(shell_id))
        task = asyncio.get_running_loop().create_task(self._forward(engine, shell_id, notifier, start))
        self._tasks[(actor, shell_id)] = task
        return True

    def unsubscribe(self, actor: str, shell_id: str) -> bool:
        task = self._tasks.pop((actor, shell_id), None)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    async def end_actor(self, actor: str) -> None:
        """Stop every subscription of one conversation."""
        keys = [k for k in self._tasks if k[0] == actor]
        await self._stop([self._tasks.pop(k) for k in keys])

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await self._stop(tasks)

    @staticmethod
    async def _stop(tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _forward(self, engine: SessionEngine, shell_id: str, notifier: Notifier, pos: int) -> None:
        waker = engine.watcher.waker(shell_id)
        path = engine.log_of(shell_id)
        try:
            pane = await engine.pane(shell_id)
            held = False
            while True:
                waker.clear()
                quiet = False
                try:
                    await asyncio.wait_for(waker.wait(), timeout=HOLD_S if held else 5.0)
                except TimeoutError:
                    quiet = True
                if not procinfo.alive(pane.pid):
                    await notifier.log("info", "tether.shell", {"shell": shell_id, "event": "ended"})
                    return
                await asyncio.sleep(BATCH_S)  # coalesce a burst of writes into one message
                end = log_size(path)
                if end <= pos:
                    continue
                raw = read_range(path, pos, end)
                # A line still being written is held back (until it ends, or HOLD_S of quiet): a
                # secret printed in two writes then reaches the masker whole, never in two halves.
                cut = len(raw) if quiet else raw.rfind(b"\n") + 1
                held = cut < len(raw)
                if cut == 0:
                    continue
                lines = render(raw[:cut])
                pos += cut
                if not lines:
                    continue
                await notifier.resource_updated(shell_uri(shell_id))
                dropped = max(0, len(lines) - MAX_LINES)
                payload: dict[str, object] = {
                    "shell": shell_id,
                    "uri": shell_uri(shell_id),
                    "lines": lines[-MAX_LINES:],
                }
                if dropped:
                    payload["dropped"] = dropped
                await notifier.log("info", "tether.shell", payload)
        except asyncio.CancelledError:
            raise
        except NotFoundError:
            return
        except Exception:
            logger.info("subscription to %s ended: the conversation is gone", shell_id, exc_info=True)
        finally:
            engine.watcher.drop(shell_id, waker)


class ShellResources:
    """``tether://shell/<id>``: one resource per live shell; reading it returns the screen."""

    def __init__(self, engine_for: object) -> None:
        self._engine_for = engine_for

    def _engine(self) -> SessionEngine:
        get = self._engine_for
        assert callable(get)
        engine = get()
        assert isinstance(engine, SessionEngine)
        return engine

    def handles(self, uri: str) -> bool:
        return uri.startswith(URI_PREFIX)

    async def list(self, ctx: CallContext) -> list[ResourceInfo]:
        engine = self._engine()
        records = engine.records.shells()
        out = []
        for shell_id in sorted(await engine.live()):
            rec = records.get(shell_id)
            label = rec.label if rec is not None else shell_id
            out.append(
                ResourceInfo(
                    uri=shell_uri(shell_id), name=label, description=f"screen of persistent shell {shell_id}"
                )
            )
        return out

    async def read(self, uri: str, ctx: CallContext) -> str:
        engine = self._engine()
        shell_id = uri[len(URI_PREFIX) :]
        pane = await engine.pane(shell_id)
        return "\n".join(filter_screen(await engine.capture(pane)))
