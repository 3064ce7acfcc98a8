"""Putting one question to a person, and auditing the answer.

Invariant: ``Approvals.ask`` returns only an ``Answer``, and every answer — approved, denied,
timed out, cancelled — is in the audit log before the asker acts on it: a person's decision in
the panel is audited by the process that took it (``decide``, source ``panel``); an answer given
through MCP elicitation, a timeout and a cancellation by the asking process (source ``tool``).
Nothing is granted when the audit log cannot be written. Of answers racing one another (two
pages, a page and the deadline or the asker giving up), only the one that counts is recorded
(``ApprovalQueue.decide`` holds the queue's write lock across the record); a panel answer whose
record was written but whose database write then failed is voided by a second record.

Where the question goes: to the person at the MCP client when the client declared the
elicitation capability (``PersonChannel``), else to the panel's queue (``store.approvals``),
visible to every tether process of the home — the panel may run in ``tether serve`` while the
asking call runs in a ``tether mcp``. The wait is woken by inotify (``close_watch``), never by
polling, and ends at ``[approvals] timeout_s`` with a refusal. An elicitation that fails (the
client errs, the connection drops) falls back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from tether.audit.log import AuditLog
from tether.audit.record import AuditRecord
from tether.errors import NotFoundError
from tether.store.approvals import ApprovalQueue, ApprovalRow, Channel, now_ms
from tether.store.close_watch import CloseWatch
from tether.store.db import Store

logger = logging.getLogger(__name__)

Kind = Literal["sandbox_escalation", "bypass-guard"]
Outcome = Literal["approved", "denied", "timeout", "cancelled"]
_BACKOFF_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)  # only without inotify
# A person's words with an answer, whichever way it came (the panel's field, an elicitation form):
# they reach the audit record and the agent's result, so a pasted page must not crowd out the
# command's own output there.
MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """What a person is asked. ``subject``: the command, or the shell being opened; ``mode``: the
    sandbox mode asked for, or the guard rule that blocked the command."""

    kind: Kind
    tool: str
    subject: str
    mode: str
    justification: str
    asker: str
    targets: tuple[str, ...] = ()

    def message(self) -> str:
        """The question as a person reads it (an elicitation's message, the panel's entry)."""
        why = f' Justification: "{self.justification}".' if self.justification else ""
        if self.kind == "bypass-guard":
            return (
                f"The agent ({self.asker}) wants to run `{self.subject}`, which tether's guard blocks "
                f"(rule {self.mode}).{why} Let this one command through?"
            )
        return (
            f"The agent ({self.asker}) asks to {self.subject} with sandbox permissions "
            f"{self.mode!r} instead of the default sandbox.{why} Allow it?"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonReply:
    """What the person at an MCP client answered (``None`` outcome fields: they did not)."""

    outcome: Outcome
    reason: str = ""

    def __post_init__(self) -> None:
        if len(self.reason) > MAX_REASON_CHARS:  # the same bound as the panel's field
            object.__setattr__(self, "reason", self.reason[: MAX_REASON_CHARS - 1] + "…")


class PersonChannel(Protocol):
    """A person reachable during one call (MCP elicitation); ``who`` names them for the audit."""

    @property
    def who(self) -> str: ...

    async def confirm(self, message: str, *, timeout_s: float) -> PersonReply:
        """Ask; raises ``PersonUnavailable`` when the question cannot be put at all."""
        ...


class PersonUnavailable(Exception):
    """The channel could not carry the question (the caller falls back to the panel's queue)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    approved: bool
    outcome: Outcome
    by: str  # who answered ("" when nobody did)
    channel: Channel
    reason: str  # the person's own words, if they gave any
    approval_id: str

    def refusal(self, what: str) -> str:
        """Why ``what`` is refused, for an error message."""
        if self.outcome == "denied":
            said = f': "{self.reason}"' if self.reason else ""
            return f"{self.by} denied {what}{said}"
        if self.outcome == "timeout":
            where = "at the MCP client" if self.channel == "elicitation" else "in the panel (tether serve)"
            return f"nobody answered {what} {where} in time ([approvals] timeout_s)"
        if self.by:
            return f"{self.by} dismissed the question about {what} without allowing it"
        return f"the question about {what} was withdrawn before anyone answered"


class Approvals:
    """The questions of one ``TETHER_HOME`` (see the module docstring)."""

    def __init__(self, home: Path, *, timeout_s: float, store: Store | None = None) -> None:
        self.home = home
        self.timeout_s = timeout_s
        self._store = store
        self._audit = AuditLog(home)

    @property
    def queue(self) -> ApprovalQueue:
        if self._store is None:
            self._store = Store.open(self.home)
        return ApprovalQueue(self._store, self.home)

    async def ask(self, question: Question, *, person: PersonChannel | None) -> Answer:
        if person is not None:
            try:
                return await self._elicit(question, person)
            except PersonUnavailable as exc:
                logger.warning("approvals: the client could not be asked (%s); asking in the panel", exc)
        return await self._queued(question)

    # ---- elicitation --------------------------------------------------------------------------------

    async def _elicit(self, question: Question, person: PersonChannel) -> Answer:
        row = self._row(question, "elicitation")
        try:
            reply = await person.confirm(question.message(), timeout_s=self.timeout_s)
        except PersonUnavailable:
            self.queue.close(row.id, "cancelled")
            raise
        except BaseException:
            with contextlib.suppress(Exception):
                self.queue.close(row.id, "cancelled")
                self._record(question, row, outcome="cancelled", by="", reason="", channel="elicitation")
            raise
        # A cancelled reply is the person dismissing the question: theirs too, not a withdrawal.
        by = person.who if reply.outcome != "timeout" else ""
        if reply.outcome in ("approved", "denied"):
            # The form's own wait is the deadline: an answer it took is the answer, even when the
            # loop handed it over a moment past the row's ``expires_ms`` (the row must not stay
            # pending: a panel listing would later withdraw it, contradicting this record).
            self.queue.decide(
                row.id, approve=reply.outcome == "approved", by=by, reason=reply.reason, deadline=False
            )
        else:
            self.queue.close(row.id, "expired" if reply.outcome == "timeout" else "cancelled", by=by)
        self._record(question, row, outcome=reply.outcome, by=by, reason=reply.reason, channel="elicitation")
        return Answer(
            approved=reply.outcome == "approved",
            outcome=reply.outcome,
            by=by,
            channel="elicitation",
            reason=reply.reason,
            approval_id=row.id,
        )

    # ---- the panel's queue -------------------------------------------------------------------------

    async def _queued(self, question: Question) -> Answer:
        queue = self.queue
        row = self._row(question, "panel")
        event = CloseWatch.register(queue.dir, row.id)
        try:
            answered = await self._wait(queue, row, event)
        except BaseException:
            with contextlib.suppress(Exception):
                if queue.close(row.id, "cancelled"):
                    self._record(question, row, outcome="cancelled", by="", reason="", channel="panel")
            raise
        finally:
            if event is not None:
                CloseWatch.unregister(queue.dir, row.id, event)
            queue.forget_wake(row.id)
        if answered.status in ("approved", "denied"):
            outcome: Outcome = "approved" if answered.status == "approved" else "denied"
        else:
            outcome = "timeout" if answered.status == "expired" else "cancelled"
        return Answer(
            approved=outcome == "approved",
            outcome=outcome,
            by=answered.decided_by,
            channel="panel",
            reason=answered.reason,
            approval_id=row.id,
        )

    async def _wait(self, queue: ApprovalQueue, row: ApprovalRow, event: asyncio.Event | None) -> ApprovalRow:
        """The row once it is answered, or once it expired (then audited here)."""
        step = 0
        while True:
            if event is not None:
                event.clear()
            current = queue.get(row.id)
            if current is not None and current.status != "pending":
                return current
            left = (row.expires_ms - now_ms()) / 1000
            if left <= 0:
                if queue.close(row.id, "expired"):
                    question = _question_of(row)
                    self._record(question, row, outcome="timeout", by="", reason="", channel="panel")
                continue  # answered at the last moment, or expired now: read it back
            if event is None:  # no inotify: a bounded back-off
                await asyncio.sleep(min(left, _BACKOFF_S[min(step, len(_BACKOFF_S) - 1)]))
                step += 1
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=left)

    # ---- deciding (the panel) ----------------------------------------------------------------------

    def pending(self) -> list[ApprovalRow]:
        """The panel's pending questions; one whose asking process has ended (a crash, a SIGKILL:
        nothing waits for its answer) is withdrawn here, audited as cancelled, and not listed.

        So is an unanswered question of any channel or deadline whose asker has ended: one put
        to an MCP client by a process killed while the person looked at it is never listed, and
        nothing else would ever close it."""
        gone = [row for row in self.queue.unanswered() if row.asker_gone()]
        for row in gone:
            self._withdraw(row)
        withdrawn = {row.id for row in gone}
        return [row for row in self.queue.pending() if row.id not in withdrawn]

    def _withdraw(self, row: ApprovalRow) -> None:
        if self.queue.close(row.id, "cancelled"):
            self._record(
                _question_of(row),
                row,
                outcome="cancelled",
                by="",
                reason="the process that asked has ended",
                channel=row.channel,
                source="panel",
            )

    def decided(self, window_ms: int) -> list[ApprovalRow]:
        """The panel's questions answered, expired or withdrawn in the last ``window_ms``, newest
        first: what every page shows after a question leaves the pending list (whoever answered it)."""
        return self.queue.decided_since(now_ms() - window_ms, channel="panel")

    def decide(
        self, approval_id: str, *, approve: bool, by: str, reason: str = "", actor: str | None = None
    ) -> ApprovalRow:
        """A person's answer to a pending question in the panel's queue, audited before it counts
        (``actor``: the record's actor, e.g. ``panel:alice``; ``by`` when not given);
        ``NotFoundError`` when it is no longer pending (answered, expired, unknown) or nobody waits
        for it any more (the process that asked has ended: then it is withdrawn)."""
        queue = self.queue
        row = queue.get(approval_id)
        if row is not None and row.status == "pending" and row.asker_gone():
            self._withdraw(row)
            raise NotFoundError(
                f"approval {approval_id} was withdrawn: the process that asked has ended, so nothing "
                "waits for an answer (the agent asks again if it still needs it)"
            )
        if row is None or row.status != "pending" or row.expires_ms <= now_ms():
            raise NotFoundError(no_longer_pending(approval_id, row))
        if row.channel != "panel":
            raise NotFoundError(
                f"approval {approval_id} is being asked of the person at the MCP client (elicitation); "
                "it is answered there, not in the panel"
            )
        outcome: Outcome = "approved" if approve else "denied"
        recorded: list[AuditRecord] = []

        def record(pending: ApprovalRow) -> None:
            # Audited first, under the queue's write lock: a decision that cannot be recorded is
            # not taken, and one that loses a race (another answer, the deadline) is not recorded.
            recorded.append(
                self._record(
                    _question_of(pending),
                    pending,
                    outcome=outcome,
                    by=by,
                    reason=reason,
                    channel="panel",
                    source="panel",
                    actor=actor,
                )
            )

        try:
            taken = queue.decide(
                approval_id, approve=approve, by=by, reason=reason, channel="panel", before=record
            )
        except BaseException as exc:
            if recorded:  # the record is on disk, the answer is not: say so in the log
                self._void(recorded[0], approval_id, by=actor or by, error=exc)
            raise
        if not taken:  # another answer (or the deadline) came first: say whose
            raise NotFoundError(no_longer_pending(approval_id, queue.get(approval_id)))
        answered = queue.get(approval_id)
        assert answered is not None
        return answered

    # ---- records -------------------------------------------------------------------------------------

    def _void(self, record: AuditRecord, approval_id: str, *, by: str, error: BaseException) -> None:
        """The answer ``record`` logged did not take effect (the database refused its write after
        the record was durable: a full disk), so a second record says so. Best effort: on a disk
        too full for it, the first record stands until the asker's own later one (its timeout)."""
        with contextlib.suppress(Exception):
            self._audit.append(
                actor=by,
                source="panel",
                tool=record.tool,
                action="approval",
                targets=list(record.targets),
                command=record.command,
                outcome="error",
                detail=(
                    f"the answer recorded as seq {record.seq} did not take effect ({error}); "
                    "the question is still pending"
                ),
                flags=list(record.flags),
                extra={"approval": approval_id, "answer": "not-taken", "voids": record.seq},
            )

    def _row(self, question: Question, channel: Channel) -> ApprovalRow:
        return self.queue.ask(
            kind=question.kind,
            tool=question.tool,
            subject=question.subject,
            mode=question.mode,
            justification=question.justification,
            asker=question.asker,
            targets=question.targets,
            channel=channel,
            timeout_ms=int(self.timeout_s * 1000),
        )

    def _record(
        self,
        question: Question,
        row: ApprovalRow,
        *,
        outcome: Outcome,
        by: str,
        reason: str,
        channel: Channel,
        source: Literal["tool", "panel"] = "tool",
        actor: str | None = None,
    ) -> AuditRecord:
        """One audit record per answer: who (``actor``), when, what (tool, command, mode), the answer."""
        flags = ["bypass-guard"] if question.kind == "bypass-guard" else [f"sandbox:{question.mode}"]
        detail = {
            "approved": f"approved by {by}",
            "denied": f"denied by {by}",
            "timeout": f"nobody answered within {self.timeout_s:g} s; refused",
            "cancelled": f"dismissed by {by} without an answer" if by else "withdrawn before anyone answered",
        }[outcome]
        return self._audit.append(
            actor=actor or by or question.asker,
            source=source,
            tool=question.tool,
            action="approval",
            targets=list(question.targets),
            command=question.subject,
            outcome="ok" if outcome == "approved" else ("timeout" if outcome == "timeout" else "refused"),
            detail=detail,
            # The person's words are the reason of their answer (``by`` is its author).
            reason=(reason or detail) if by else (question.justification or None),
            flags=flags,
            extra={
                "approval": row.id,
                "kind": question.kind,
                "mode": question.mode,
                "asker": question.asker,
                "channel": channel,
                "answer": outcome,
                "justification": question.justification,
                "asked_ms": row.created_ms,
            },
        )


def _question_of(row: ApprovalRow) -> Question:
    kind: Kind = "bypass-guard" if row.kind == "bypass-guard" else "sandbox_escalation"
    return Question(
        kind=kind,
        tool=row.tool,
        subject=row.subject,
        mode=row.mode,
        justification=row.justification,
        asker=row.asker,
        targets=row.targets,
    )


def _clock(ms: int | None) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ms / 1000)) if ms else "an unknown time"


def no_longer_pending(approval_id: str, row: ApprovalRow | None) -> str:
    """Why an answer to ``approval_id`` does not count: it is unknown, or what happened to it, by
    whom and when — the words of the person who lost a race to another page (or to the deadline),
    or who answered from a page that had not heard of the decision yet."""
    tail = "; only a pending question can be answered"
    if row is None:
        return f"approval {approval_id} is unknown{tail}"
    if row.status in ("approved", "denied"):
        said = f' (their words: "{row.reason}")' if row.reason else ""
        return (
            f"approval {approval_id} was already {row.status} by {row.decided_by or 'someone'} at "
            f"{_clock(row.decided_ms)}{said}; your answer did not count{tail}"
        )
    if row.status == "cancelled":
        withdrawn = _clock(row.decided_ms)
        return f"approval {approval_id} was withdrawn at {withdrawn} (its asker stopped waiting){tail}"
    when = row.decided_ms if row.status == "expired" and row.decided_ms else row.expires_ms
    return f"approval {approval_id} expired unanswered at {_clock(when)}{tail}"
