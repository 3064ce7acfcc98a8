"""The panel's approvals view: the questions agents put to a person, pushed to every open page,
and the person's answer — both through the people-only ``approvals`` tool.

Invariants:

- A page sees exactly the questions of the panel's queue that are still pending and unexpired —
  from this process or any other of the same home (a ``tether mcp`` asks, the person answers in
  ``tether serve``). It hears of a change at once: the stream's ``approvals list`` call waits
  (``waitMs``) until the pending or the decided questions differ from what the page was last sent
  (the tool's ``known``), woken by the queue's inotify file and by the next expiry; never on a
  polling period. A question that expires leaves the pending list at its deadline and joins the
  decided ones as soon as its asker closes it. Each message also carries
  the questions decided lately (who decided, when, their words), so a question answered on one page
  shows its outcome on every page, not only vanishes.
- Answering is one ``approvals answer`` call (a POST); the tool audits the decision before it
  counts, and a question answered, expired or withdrawn meanwhile is ``NOT_FOUND``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tether.errors import UsageError
from tether.panel.calls import PanelCalls, PanelError

_WAIT_MS = 30_000  # one long wait per call; the stream calls again at once


async def approvals_stream(calls: PanelCalls) -> AsyncIterator[str]:
    """JSON messages for one page: the pending questions now, then whenever they change."""
    known: list[str] | None = None
    while True:
        args: dict[str, Any] = {"action": "list"}
        if known is not None:
            args.update(waitMs=_WAIT_MS, known=known)
        try:
            result = await calls.tool("approvals", args, audited=False)
        except PanelError as exc:
            # No approvals here (a registry without the tool) or none readable: the page is told
            # once, and the shell list keeps its socket.
            yield json.dumps({"type": "approvals", "pending": [], "error": exc.message})
            await anyio.sleep_forever()
        data = result.structured
        pending = data.get("pending", [])
        now_known = [str(k) for k in data.get("known", [])]  # the tool's: pending and decided
        if now_known != known:
            known = now_known
            yield json.dumps(
                {
                    "type": "approvals",
                    "now": data.get("now"),
                    "pending": pending,
                    "decided": data.get("decided", []),
                    "decidedWindowMs": data.get("decidedWindowMs", 0),
                }
            )


def approval_routes(
    calls: PanelCalls,
    body: Callable[[Request], Awaitable[dict[str, Any]]],
    endpoint: Callable[[Callable[[Request], Awaitable[Any]]], Callable[[Request], Awaitable[Response]]],
) -> list[BaseRoute]:
    """``GET /approvals`` (the pending questions) and ``POST /approvals/{id}`` with
    ``{"approve": true|false, "reason": "…"}`` (the person's answer)."""

    async def list_pending(request: Request) -> Any:
        result = await calls.tool("approvals", {"action": "list"}, audited=False)
        return {"pending": result.structured.get("pending", [])}

    async def answer(request: Request) -> Any:
        data = await body(request)
        approve = data.get("approve")
        if not isinstance(approve, bool):
            raise UsageError('"approve" must be true (let it through) or false (refuse it)')
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise UsageError('"reason" must be a string (your words), or left out')
        args = {
            "action": "answer",
            "id": request.path_params["approval_id"],
            "approve": approve,
            "reason": reason,
        }
        result = await calls.tool("approvals", args)
        return dict(result.structured)

    return [
        Route("/approvals", endpoint(list_pending), methods=["GET"]),
        Route("/approvals/{approval_id}", endpoint(answer), methods=["POST"]),
    ]
