"""Subscriptions: new output of a shell pushed to a conversation as MCP notifications.

Invariant: at most one forwarding task per (conversation, shell) in a process; it forwards what
``shells.follow`` yields as ``notifications/resources/updated`` for ``tether://shell/<id>`` plus a
log message carrying the new lines (at most ``MAX_LINES`` per message; the masker,
``tools.audited.MaskingNotifier``, sees every line whole). It ends on ``unsubscribe``, when the shell
ends, when the notifier fails (the conversation went away), or on ``close``.

``ShellResources`` publishes one readable resource per live shell: its current screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tether.errors import NotFoundError
from tether.shells import Shells, follow, position, screen_text
from tether.tools.registry import CallContext, Notifier, ResourceInfo

logger = logging.getLogger(__name__)

URI_PREFIX = "tether://shell/"
MAX_LINES = 200


def shell_uri(shell_id: str) -> str:
    return URI_PREFIX + shell_id


class Subscriptions:
    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def active(self, actor: str, shell_id: str) -> bool:
        task = self._tasks.get((actor, shell_id))
        return task is not None and not task.done()

    def subscribe(self, shells: Shells, actor: str, shell_id: str, notifier: Notifier) -> bool:
        """Start forwarding; ``False`` if this conversation already subscribed (idempotent)."""
        if self.active(actor, shell_id):
            return False
        start = position(shells, shell_id)
        task = asyncio.get_running_loop().create_task(self._forward(shells, shell_id, notifier, start))
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

    async def _forward(self, shells: Shells, shell_id: str, notifier: Notifier, pos: int) -> None:
        try:
            async for lines in follow(shells, shell_id, pos):
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
            await notifier.log("info", "tether.shell", {"shell": shell_id, "event": "ended"})
        except asyncio.CancelledError:
            raise
        except NotFoundError:
            return
        except Exception:
            logger.info("subscription to %s ended: the conversation is gone", shell_id, exc_info=True)


class ShellResources:
    """``tether://shell/<id>``: one resource per live shell; reading it returns the screen."""

    template = ResourceInfo(
        uri=URI_PREFIX + "{shell}",
        name="shell screen",
        description="the screen of a persistent shell; {shell} is its id (shell_state lists them)",
    )

    def __init__(self, shells_for: Callable[[], Shells]) -> None:
        self._shells_for = shells_for

    def handles(self, uri: str) -> bool:
        return uri.startswith(URI_PREFIX)

    async def list(self, ctx: CallContext) -> list[ResourceInfo]:
        shells = self._shells_for()
        records = shells.records.shells()
        out = []
        for shell_id in sorted(await shells.live()):
            rec = records.get(shell_id)
            label = rec.label if rec is not None else shell_id
            out.append(
                ResourceInfo(
                    uri=shell_uri(shell_id), name=label, description=f"screen of persistent shell {shell_id}"
                )
            )
        return out

    async def read(self, uri: str, ctx: CallContext) -> str:
        shell_id = uri[len(URI_PREFIX) :]
        return await screen_text(self._shells_for(), shell_id)
