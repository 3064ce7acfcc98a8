"""Request ids unique among the requests in flight, as JSON-RPC 2.0 requires of a client.

Invariants this module owns:

- A request whose id names a request of the same conversation that was read and not yet
  answered (nor cancelled to its end) is answered at once with INVALID_REQUEST (``duplicate_id``:
  the id, that it is in use, and to send again with a new one) and goes no further; the first
  request is answered as if the second had never come. The MCP SDK itself lets a reused id
  overwrite the first (its dispatcher's table, for parity with the TypeScript SDK): both got an
  answer with that id, a ``notifications/cancelled`` reached only the second, and over HTTP the
  first request's stream was replaced.
- Ids compare as the SDK correlates them (``request_key``): ``"7"`` is ``7``, since a
  ``notifications/cancelled`` naming either reaches the request.
- stdio checks as each line is read (``tether.mcp.stdio``); HTTP checks each POST of a session
  (``UniqueRequestIds``), the id being in use until the POST carrying it has been answered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.dispatcher import coerce_request_id
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.mcp.wire import INVALID_REQUEST, error_response

logger = logging.getLogger(__name__)

_SESSION_HEADER: Final = "mcp-session-id"


def request_key(item: dict[str, Any]) -> Any:
    """The id of a request (a method and an integer or string id) as the SDK correlates ids,
    else ``None`` (a notification, a response, or an id the SDK refuses anyway)."""
    rid = item.get("id")
    if not isinstance(item.get("method"), str):
        return None
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return coerce_request_id(rid)
    return None


def duplicate_id(rid: Any) -> dict[str, Any]:
    """The answer to a request whose id a request still in flight uses."""
    logger.info("refused a request reusing id %r, which a request in flight holds", rid)
    return error_response(
        rid,
        INVALID_REQUEST,
        f"Invalid request: id {rid!r} is already in use by a request still in progress; JSON-RPC "
        "request ids must be unique among requests in flight: send this request again with a new id",
    )


class UniqueRequestIds:
    """Wraps the MCP endpoint: a POST of a session carrying a request whose id a POST of the same
    session still waits on is answered with ``duplicate_id`` (HTTP 200, JSON) and never reaches
    the SDK. The body is read here (up to the SDK's limit, past which it is passed on unread for
    the SDK to refuse) and handed on as it came."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._in_flight: set[tuple[str, Any]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = Headers(scope=scope).get(_SESSION_HEADER) if scope["type"] == "http" else None
        if session is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        read, whole = await _read_body(receive)
        replay = _replaying(read, receive)
        key = _key_of(read) if whole else None
        if key is None:
            await self.app(scope, replay, send)
            return
        held = (session, key)
        if held in self._in_flight:
            rid = json.loads(b"".join(m.get("body", b"") for m in read))["id"]
            await JSONResponse(duplicate_id(rid))(scope, replay, send)
            return
        self._in_flight.add(held)
        try:
            await self.app(scope, replay, send)
        finally:
            self._in_flight.discard(held)


async def _read_body(receive: Receive) -> tuple[list[Message], bool]:
    """The body's messages, read up to the SDK's limit; ``True``: that is the whole body."""
    read: list[Message] = []
    size = 0
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            return read, False  # the client left: the SDK sees it as it would have
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return read, size <= DEFAULT_MAX_REQUEST_BODY_SIZE
        if size > DEFAULT_MAX_REQUEST_BODY_SIZE:
            return read, False


def _replaying(read: list[Message], receive: Receive) -> Callable[[], Awaitable[Message]]:
    pending = list(read)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


def _key_of(read: list[Message]) -> Any:
    try:
        value = json.loads(b"".join(m.get("body", b"") for m in read))
    except (ValueError, RecursionError):
        return None  # the SDK answers what it cannot parse
    return request_key(value) if isinstance(value, dict) else None
