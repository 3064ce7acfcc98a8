"""tether.approvals — questions put to a person, shared by every tether process of one home.

The face::

    Approvals        ask(question, person=...) -> Answer; decide(id, approve=..., by=...) (the panel)
    Question         what is asked (an escalation, a guard block), in words a person reads
    Answer           approved / denied / timeout / cancelled, who answered, their words
    PersonChannel    a person reachable during one call (MCP elicitation), and PersonReply
    PersonUnavailable  the channel could not carry the question (the queue is used instead)
    ApprovalRow      one queued question as the panel lists it

Invariant: see ``asking`` — every answer is audited before anything acts on it, and a question
nobody answers in ``[approvals] timeout_s`` is refused.
"""

from tether.approvals.asking import (
    MAX_REASON_CHARS,
    Answer,
    Approvals,
    PersonChannel,
    PersonReply,
    PersonUnavailable,
    Question,
)
from tether.store.approvals import ApprovalRow

__all__ = [
    "MAX_REASON_CHARS",
    "Answer",
    "ApprovalRow",
    "Approvals",
    "PersonChannel",
    "PersonReply",
    "PersonUnavailable",
    "Question",
]
