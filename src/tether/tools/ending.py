"""Why a call ended before it answered: the one place that names the causes an audit record gives.

Invariants this module owns:

- A call cancelled before it answered is audited ``cancelled`` (the record's ``outcome``), with
  the cause as one of ``END_CAUSES`` in ``extra.cause`` — a stable word a script matches — and the
  words a person reads as its ``detail``. Nothing downstream parses the words.
- The front door that ends a call (or lets the SDK end it) says why, through the call's
  ``CallContext.ending``: asked once, when the cancellation reaches the audit middleware, so a door
  may answer from state the cancellation left behind (the SDK's record of the peer's
  ``notifications/cancelled``, an HTTP session's transport). A process being stopped by a signal
  (``ServerStop``) outranks what any door says: every call cancelled from then on was cancelled
  by that stop. A call no door explains (a library program cancelling its own task) is
  ``caller-cancelled``.
- An HTTP client whose connection drops mid-call has cancelled nothing (MCP: a disconnection is not
  a cancellation): its call runs on and is audited as it ends, or ``session-expired`` if the
  session's idle limit ends it first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

EndCause = Literal[
    "client-cancelled",
    "client-left",
    "session-ended",
    "session-expired",
    "server-stopped",
    "caller-cancelled",
]

# Each cause and the words its record's ``detail`` gives (docs/audit.md lists them).
END_CAUSES: Final[Mapping[EndCause, str]] = {
    "client-cancelled": "the MCP client cancelled the call (notifications/cancelled)",
    "client-left": "the MCP client left during the call",
    "session-ended": "the HTTP client ended its MCP session (DELETE) during the call",
    "session-expired": "tether serve ended the MCP session: no request of it in flight for its idle limit",
    "server-stopped": "the server was stopped",
    "caller-cancelled": "the caller cancelled the call",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """Why one call ended before it answered: a cause, and what a person reads of it."""

    cause: EndCause
    note: str = ""  # what narrows the cause down, e.g. the signal that stopped the server

    def words(self) -> str:
        text = END_CAUSES[self.cause]
        return f"{text} ({self.note})" if self.note else text


# A front door's answer to "why was this call cancelled?", asked as the cancellation is audited;
# ``None``: the door does not know (the call is then ``caller-cancelled``).
WhyEnded = Callable[[], Ending | None]

CALLER_CANCELLED: Final = Ending(cause="caller-cancelled")


class ServerStop:
    """A process told to stop by a signal: from then on every cancelled call was cancelled by it."""

    def __init__(self) -> None:
        self.ending: Ending | None = None

    def begin(self, signal_name: str) -> None:
        """Called from a signal handler (synchronous; the first signal names the stop)."""
        if self.ending is None:
            self.ending = Ending(cause="server-stopped", note=f"{signal_name} to tether")

    def why(self, door: WhyEnded | None) -> Ending:
        """The ending of a call cancelled now, whose front door explains it with ``door``."""
        if self.ending is not None:
            return self.ending
        told = door() if door is not None else None
        return told if told is not None else CALLER_CANCELLED
