"""The HTTP connections of ``tether serve``: what a client may hold before it has been let in.

Invariants this module owns:

- A connection must deliver a whole request head (request line and headers) within
  ``HEAD_TIMEOUT_S`` of opening, and of finishing its previous response; otherwise it is answered
  408 and closed. uvicorn's own keep-alive timer is cancelled by any byte received and there is no
  timer at all before the first request, so a client that sent half a head — or one byte every few
  seconds — held its socket forever, before the token or the Host guard could say anything. Many
  such connections, from anyone who could reach the port, used up the server's descriptors, and
  with them every other client's connections and every command's pipes.
- At most ``max_waiting()`` connections of one server wait for a head at once; a new one beyond
  that closes the one that has waited longest (answered 503, unless it is idle after an answer). The
  deadline alone let a flood of connections faster than one every ``HEAD_TIMEOUT_S`` / descriptors
  (0.5 ms here) use up the descriptors all the same; evicting the oldest rather than refusing the
  newest keeps the port open to a client that sends its head at once (a flood only evicts itself).
- Once a head is complete the timer is gone: a request's body, a long call and a WebSocket (the
  panel) are the app's business, behind its guards.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import weakref
from typing import Any, Final

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

HEAD_TIMEOUT_S: Final = 10.0
_MESSAGE: Final = (
    f"the request head (request line and headers) did not arrive within {HEAD_TIMEOUT_S:g} s; "
    "send it whole, then the body\n"
).encode()
_REPLY: Final = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
    b"content-length: " + str(len(_MESSAGE)).encode() + b"\r\n\r\n" + _MESSAGE
)


_BUSY_MESSAGE: Final = b"too many connections are waiting to send a request; try again\n"
_BUSY_REPLY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
    b"content-length: " + str(len(_BUSY_MESSAGE)).encode() + b"\r\n\r\n" + _BUSY_MESSAGE
)


def max_waiting() -> int:
    """How many connections may wait for a head at once: 256, or a quarter of the descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(16, min(256, soft // 4))


# Per server (uvicorn's state object): the connections waiting for a head, oldest first.
_waiting: weakref.WeakKeyDictionary[object, dict[HeadDeadlineProtocol, None]] = weakref.WeakKeyDictionary()


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 connection with a deadline on each request head (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_of: object = None  # the scope the timer was armed after (None: the first head)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        # A new scope is made for each complete head (an upgrade to a WebSocket included).
        if self._head_timer is not None and self.scope is not self._head_of:
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        # Armed before the base class reads a pipelined request, which then disarms it at once.
        if not self.transport.is_closing():
            self._arm_head_timer()
        super().on_response_complete()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_of = self.scope
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
        waiting = _waiting.setdefault(self.server_state, {})
        waiting[self] = None
        if len(waiting) > max_waiting():
            oldest = next(iter(waiting))
            oldest._evict()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        _waiting.get(self.server_state, {}).pop(self, None)

    def _evict(self) -> None:
        """Close to make room for a newer connection: answered 503 unless it was an idle one kept
        alive after an answer (which a client expects a server to close)."""
        self._cancel_head_timer()
        if self.transport.is_closing():
            return
        logger.info("closed a connection from %s: too many were waiting to send a request", self.client)
        if self._head_of is None:  # a new connection, read or not: a client waits for its answer
            self.transport.write(_BUSY_REPLY)
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        logger.info("closed a connection from %s that sent no whole request head in time", self.client)
        self.transport.write(_REPLY)
        self.transport.close()
