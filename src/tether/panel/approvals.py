"""The panel's side of person approvals: the pending questions, pushed to every open page, and
the person's answer.

Invariants:

- A page sees exactly the questions ``tether.approvals`` put in the panel's queue that are still
  pending and unexpired — from this process or any other of the same home (a ``tether mcp`` asks,
  the person answers in ``tether serve``). A page hears of a change at once: the stream waits on
  the queue's wake-up file (inotify), and on the next expiry so an unanswered question leaves the
  list when it is refused; never on a polling period.
- Answering goes through ``Approvals.decide``, which audits the decision (the person, the time,
  the question, the answer and their words) before it counts; an answer to a question that was
  answered, expired or withdrawn meanwhile is ``NOT_FOUND``, never a second decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tether.approvals import ApprovalRow, Approvals, Question
from tether.config import Config
from tether.errors import UsageError
from tether.store.approvals import QUEUE_FILE, now_ms
from tether.store.close_watch import CloseWatch

PANEL_PERSON = "person at the panel"
_FALLBACK_S = 1.0  # only without inotify (no instances left): re-read at this period


def approval_json(row: ApprovalRow) -> dict[str, Any]:
    question = Question(
        kind="bypass-guard" if row.kind == "bypass-guard" else "sandbox_escalation",
        tool=row.tool,
        subject=row.subject,
        mode=row.mode,
        justification=row.justification,
        asker=row.asker,
        targets=row.targets,
    )
    return {
        "id": row.id,
        "kind": row.kind,
        "tool": row.tool,
        "subject": row.subject,
        "mode": row.mode,
        "justification": row.justification,
        "asker": row.asker,
        "question": question.message(),
        "createdMs": row.created_ms,
        "expiresMs": row.expires_ms,
    }


class ApprovalFeed:
    """The panel's view of one home's approval queue (see the module docstring)."""

    def __init__(self, config: Config) -> None:
        self.approvals = Approvals(config.home, timeout_s=config.approvals.timeout_s)

    def pending(self) -> list[ApprovalRow]:
        return self.approvals.queue.pending()

    async def stream(self) -> AsyncIterator[str]:
        """JSON messages for one page: the pending questions now, then whenever they change."""
        queue = self.approvals.queue
        queue.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        event = CloseWatch.register(queue.dir, QUEUE_FILE)
        last = ""
        try:
            while True:
                if event is not None:
                    event.clear()
                rows = await anyio.to_thread.run_sync(self.pending)
                body = json.dumps([approval_json(r) for r in rows], sort_keys=True)
                if body != last:
                    last = body
                    yield json.dumps({"type": "approvals", "now": now_ms(), "pending": json.loads(body)})
                # The next expiry is a change too: the question leaves the list when refused.
                wait = min((r.expires_ms - now_ms()) / 1000 for r in rows) if rows else None
                if event is None:
                    wait = _FALLBACK_S if wait is None else min(wait, _FALLBACK_S)
                if wait is not None and wait <= 0:
                    continue
                with contextlib.suppress(TimeoutError):
                    if event is None:
                        await asyncio.sleep(wait or _FALLBACK_S)
                    else:
                        await asyncio.wait_for(event.wait(), timeout=wait)
        finally:
            if event is not None:
                CloseWatch.unregister(queue.dir, QUEUE_FILE, event)

    def decide(self, approval_id: str, *, approve: bool, reason: str) -> ApprovalRow:
        return self.approvals.decide(approval_id, approve=approve, by=PANEL_PERSON, reason=reason)


def approval_routes(
    feed: ApprovalFeed,
    body: Callable[[Request], Awaitable[dict[str, Any]]],
    endpoint: Callable[[Callable[[Request], Awaitable[Any]]], Callable[[Request], Awaitable[Response]]],
) -> list[BaseRoute]:
    """``GET /approvals`` (the pending questions) and ``POST /approvals/{id}`` with
    ``{"approve": true|false, "reason": "…"}`` (the person's answer)."""

    async def list_pending(request: Request) -> Any:
        rows = await anyio.to_thread.run_sync(feed.pending)
        return {"pending": [approval_json(r) for r in rows]}

    async def answer(request: Request) -> Any:
        data = await body(request)
        approve = data.get("approve")
        if not isinstance(approve, bool):
            raise UsageError('"approve" must be true (let it through) or false (refuse it)')
        reason = data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 500:
            raise UsageError('"reason" must be a string of at most 500 characters (or left out)')
        approval_id = request.path_params["approval_id"]
        row = await anyio.to_thread.run_sync(
            lambda: feed.decide(approval_id, approve=approve, reason=reason.strip())
        )
        return {"id": row.id, "status": row.status, "by": row.decided_by}

    return [
        Route("/approvals", endpoint(list_pending), methods=["GET"]),
        Route("/approvals/{approval_id}", endpoint(answer), methods=["POST"]),
    ]
