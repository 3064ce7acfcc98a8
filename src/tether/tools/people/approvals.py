"""The people-only ``approvals`` tool: the panel's (and the CLI's) door to the questions agents put
to a person (``tether.approvals``).

    approvals  list (the pending questions of the panel's queue, and those decided in the last
               ``DECIDED_WINDOW_MS``: by whom, when, their words; and ``known``, which names both;
               ``waitMs`` waits until that differs from the ``known`` given, woken by the queue's
               inotify file and the next expiry)
               · answer (approve or deny one pending question, with the person's words)

Invariant: an answer is audited by ``Approvals.decide`` before it counts (the ``approval``
record: the person, the time, the question, the answer and their words), so the tool call itself
writes no second record (``audit_calls=False``); a question answered, expired or withdrawn
meanwhile is ``NOT_FOUND``, never a second decision. Listing writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from tether.approvals import MAX_REASON_CHARS, ApprovalRow, Approvals, Question
from tether.config import Config
from tether.errors import UsageError
from tether.store.approvals import QUEUE_FILE, now_ms
from tether.store.close_watch import CloseWatch
from tether.tools.arguments import parse_arguments
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

PERSON_OF_SOURCE = {"panel": "person at the panel", "cli": "person at the command line"}
_FALLBACK_S = 1.0  # only without inotify (no instances left): re-read at this period
MAX_WAIT_MS = 60_000
# How long a question answered (or expired, or withdrawn) is still listed as ``decided``: every open
# page shows who decided it, not only the page that answered.
DECIDED_WINDOW_MS = 5 * 60_000


class ApprovalsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    action: Literal["list", "answer"]
    id: str | None = None
    approve: bool | None = None
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS, alias="waitMs")
    known: list[str] = Field(default_factory=list, max_length=500)


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


def decided_json(row: ApprovalRow) -> dict[str, Any]:
    """A question no longer pending, as every page shows it for ``DECIDED_WINDOW_MS``: what was
    asked, what became of it, who decided and when (``outcome`` in words)."""
    if row.status in ("approved", "denied"):
        said = f': "{row.reason}"' if row.reason else ""
        outcome = f"{row.status} by {row.decided_by or 'someone'}{said}"
    elif row.status == "cancelled":
        outcome = "withdrawn: its asker stopped waiting"
    else:
        outcome = "refused: nobody answered in time"
    return {
        "id": row.id,
        "tool": row.tool,
        "subject": row.subject,
        "mode": row.mode,
        "status": row.status,
        "by": row.decided_by,
        "reason": row.reason,
        "decidedMs": row.decided_ms,
        "outcome": outcome,
    }


def known_of(pending: list[ApprovalRow], decided: list[ApprovalRow]) -> list[str]:
    """What a waiting ``list`` compares: the pending ids, then each decided one with its outcome.
    Not the ids alone: a question answered moves from one list to the other with the same id, so
    the bare ids (pending, then decided) of before and after an answer are the same list, and a
    wait on them slept through the answer (the reverted first attempt, 4696ed5)."""
    return [r.id for r in pending] + [f"{r.id}={r.status}" for r in decided]


class PeopleApprovalTools:
    def __init__(self, config: Config) -> None:
        self.approvals = Approvals(config.home, timeout_s=config.approvals.timeout_s)

    def _pending(self) -> list[ApprovalRow]:
        return self.approvals.pending()

    def _decided(self) -> list[ApprovalRow]:
        return self.approvals.decided(DECIDED_WINDOW_MS)

    def _both(self) -> tuple[list[ApprovalRow], list[ApprovalRow]]:
        return self._pending(), self._decided()

    async def _changed(self, known: list[str], wait_ms: int) -> tuple[list[ApprovalRow], list[ApprovalRow]]:
        """The pending and the decided questions once they differ from ``known`` (``known_of``), or
        at ``wait_ms``: a question that expires leaves the pending ones at its deadline and joins
        the decided ones when its asker closes it (which closes the queue file: a wake-up)."""
        queue = self.approvals.queue
        queue.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        event = CloseWatch.register(queue.dir, QUEUE_FILE)
        deadline = now_ms() + wait_ms
        try:
            while True:
                if event is not None:
                    event.clear()
                rows, decided = await anyio.to_thread.run_sync(self._both)
                left = (deadline - now_ms()) / 1000
                if known_of(rows, decided) != known or left <= 0:
                    return rows, decided
                # The next expiry is a change too: the question leaves the list when refused.
                wait = min([left, *((r.expires_ms - now_ms()) / 1000 for r in rows)])
                if event is None:
                    wait = min(wait, _FALLBACK_S)
                with contextlib.suppress(TimeoutError):
                    if event is None:
                        await asyncio.sleep(max(wait, 0))
                    else:
                        await asyncio.wait_for(event.wait(), timeout=max(wait, 0))
        finally:
            if event is not None:
                CloseWatch.unregister(queue.dir, QUEUE_FILE, event)

    async def call(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("approvals", ApprovalsArgs, raw)
        if args.action == "list":
            if args.wait_ms:
                rows, decided_rows = await self._changed(args.known, args.wait_ms)
            else:
                rows, decided_rows = await anyio.to_thread.run_sync(self._both)
            pending = [approval_json(r) for r in rows]
            decided = [decided_json(r) for r in decided_rows]
            text = f"{len(pending)} question(s) waiting for a person" + "".join(
                f"\n{p['id']}: {p['question']}" for p in pending
            )
            if decided:
                text += (
                    f"\n{len(decided)} decided in the last {DECIDED_WINDOW_MS // 60_000} minutes"
                    + "".join(f"\n{d['id']}: {d['outcome']}" for d in decided)
                )
            structured = {
                "pending": pending,
                "decided": decided,
                "known": known_of(rows, decided_rows),
                "decidedWindowMs": DECIDED_WINDOW_MS,
                "now": now_ms(),
            }
            return ToolResult(text=text, structured=structured)
        if not args.id or args.approve is None:
            raise UsageError(
                "approvals answer needs id (the question's apr-… id) and approve (true lets it "
                "through, false refuses it)"
            )
        by = (
            f"{ctx.who} at the {ctx.source}"
            if ctx.who
            else PERSON_OF_SOURCE.get(ctx.source, f"person ({ctx.actor})")
        )
        approval_id, approve, reason = args.id, args.approve, args.reason.strip()
        row = await anyio.to_thread.run_sync(
            lambda: self.approvals.decide(
                approval_id, approve=approve, by=by, reason=reason, actor=ctx.audit_actor if ctx.who else None
            )
        )
        return ToolResult(
            text=f"{row.id}: {row.status} by {row.decided_by}",
            structured={"id": row.id, "status": row.status, "by": row.decided_by},
        )


def register_people_approval_tools(registry: ToolRegistry, *, config: Config) -> PeopleApprovalTools:
    tools = PeopleApprovalTools(config)
    registry.add(
        ToolDef(
            name="approvals",
            title="Approvals",
            description="Approvals: the questions agents put to a person (list, waiting for a "
            "change; answer one: approve or deny, with your words).",
            input_schema=ApprovalsArgs.model_json_schema(by_alias=True),
            handler=tools.call,
            read_only=False,
            people_only=True,
            audit_calls=False,  # an answer's record is the approval's own (see the docstring)
        )
    )
    return tools
