"""``tether serve``: MCP over streamable HTTP, one conversation per MCP session.

Invariants this module owns:

- Every request first passes the Host/Origin guard (DNS-rebinding protection): the ``Host`` must
  name the bound address, a loopback name, or an explicitly allowed host, and an ``Origin``, when
  present, must be one of those too. Then the MCP endpoint needs ``Authorization: Bearer <token>``
  (401 otherwise, compared in constant time).
- MCP session ids are 256-bit random values (``secrets``), not the SDK's 122-bit uuid4; a request
  with a missing or unknown session id is refused by the session manager, never attributed to a
  session it did not open.
- The SDK's answers to a missing session id (400), an unknown or ended one (404) and a full session
  table (503) keep their status and JSON-RPC code and name the cause and the fix (send
  ``initialize``; end unused sessions with ``DELETE``), instead of the SDK's bare words.
- Requests in the 2026-07-28 per-request protocol era are refused with -32022 naming the
  handshake versions, so SDK clients fall back to ``initialize`` (see ``tether.mcp.server``).
- A request body over the MCP SDK's limit (4 MiB) is answered 413 with a JSON-RPC error naming
  the limit and the fix, which the SDK's client hands to the caller; the SDK's own answer is
  plain text, which its client turned into "Server returned an error response".
- A request reusing the id of one still in flight in its session is answered at once with an
  INVALID_REQUEST naming the id (``tether.mcp.request_ids``); the first goes on.
- A call cancelled because its session ended is audited with that cause: ``DELETE``
  (``session-ended``) or the SDK's idle limit (``session-expired``), read off the session's
  transport as the cancellation is audited (``RandomSessionIdManager.watch``).
- ``build_http_app`` accepts extra routes, middleware and lifespans, so the web panel mounts at
  ``/panel`` on this same app behind the same Host/Origin guard.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    StreamableHTTPASGIApp,
    StreamableHTTPSessionManager,
)
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.mcp.request_ids import UniqueRequestIds
from tether.mcp.server import McpFrontDoor
from tether.mcp.token import bearer_matches
from tether.mcp.wire import INVALID_REQUEST
from tether.tools.ending import Ending, WhyEnded

logger = logging.getLogger(__name__)

MCP_PATH: Final = "/mcp"
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "::1")
SESSION_IDLE_MINUTES: Final = round(DEFAULT_SESSION_IDLE_TIMEOUT / 60)  # the SDK's idle limit

Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


_DNS_NAME: Final = re.compile(
    r"(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)


def host_name(value: str) -> str | None:
    """``value`` as a ``Host`` a client may send, without its port: a DNS name (lowercased) or an
    IP address (IPv6 in brackets, as ``Host`` carries it); None when it is neither (a scheme, a
    port, a path, a wildcard or a space can never match a ``Host``)."""
    name = value.strip().lower().removesuffix(".")
    try:
        ip = ipaddress.ip_address(name[1:-1] if name.startswith("[") and name.endswith("]") else name)
    except ValueError:
        return name if _DNS_NAME.fullmatch(name) else None
    return f"[{ip}]" if ip.version == 6 else str(ip)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    """Where ``tether serve`` listens and whom it lets in."""

    host: str
    token: str
    allowed_hosts: tuple[str, ...] = ()  # extra Host names accepted (e.g. a LAN name with --allow-remote)

    def host_names(self) -> frozenset[str]:
        names = {*LOOPBACK_NAMES, *self.allowed_hosts}
        if self.host not in ("0.0.0.0", "::"):
            names.add(f"[{self.host}]" if ":" in self.host else self.host)
        return frozenset(name.lower() for name in names)


def _host_name(value: str) -> str:
    """``Host`` header value without its port (``[::1]:8765`` → ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostOriginGuard:
    """ASGI middleware refusing a foreign ``Host`` (421) or a foreign ``Origin`` (403)."""

    def __init__(self, app: ASGIApp, *, names: frozenset[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if _host_name(host) not in self.names:
            logger.warning("refused a request with Host %r (DNS-rebinding protection)", host[:100])
            await _refuse(scope, receive, send, 421, f"Host {host!r} is not served here")
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            logger.warning("refused a cross-origin request from %r", origin[:100])
            await _refuse(scope, receive, send, 403, f"Origin {origin!r} is not allowed")
            return
        await self.app(scope, receive, send)

    def _origin_ok(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and _host_name(rest.split("/", 1)[0]) in self.names


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    await PlainTextResponse(message, status_code=status)(scope, receive, send)


class BearerGate:
    """Wraps the MCP endpoint: no valid bearer token, no MCP (401)."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not bearer_matches(Headers(scope=scope).get("authorization"), self.token):
            response = JSONResponse(
                {
                    "error": "unauthorized",
                    "message": "send Authorization: Bearer <token from $TETHER_HOME/token>",
                },
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="tether"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyTooLargeAnswer:
    """Wraps the MCP endpoint: the SDK's plain-text 413 for an oversized body becomes a JSON-RPC
    error (id null: the body holding the id was never read) that names the limit and the fix."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replacing = False

        async def answer(message: Message) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start" and message["status"] == 413:
                replacing = True
                return
            if not replacing:
                await send(message)
                return
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                mib = DEFAULT_MAX_REQUEST_BODY_SIZE // (1024 * 1024)
                logger.warning("refused a request body over %d MiB", mib)
                text = (
                    f"the request body is over the limit of {mib} MiB; send large input in pieces "
                    "(e.g. several shell_send calls)"
                )
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": text}}
                await JSONResponse(body, status_code=413)(scope, receive, send)

        await self.app(scope, receive, answer)


# The MCP SDK's answers about session ids, which name neither the cause nor the fix; the official
# Python client shows none of them (a 404 becomes its own "Session terminated"), other clients show
# the body as it is.
_SESSION_ANSWERS: Final = {
    (404, "Session not found"): "unknown",
    (404, "Not Found: Session has been terminated"): "unknown",
    (400, "Bad Request: Missing session ID"): "missing",
    (503, "Too many open sessions"): "full",
}


def session_error_text(kind: str) -> str:
    """The message that replaces the SDK's answer of ``kind`` (see ``_SESSION_ANSWERS``)."""
    if kind == "unknown":
        return (
            "session not found: this session id is not open on this server; it was ended (DELETE, "
            f"{SESSION_IDLE_MINUTES} minutes with no request, a restart of tether serve) or never "
            "existed; send initialize without a session id to start a new session"
        )
    if kind == "missing":
        return (
            "missing session id: every request but initialize must carry the Mcp-Session-Id header "
            "that the answer to initialize gave; send initialize first to open a session"
        )
    return (
        "too many open sessions: end the sessions you no longer use with DELETE (each also ends "
        f"after {SESSION_IDLE_MINUTES} minutes with no request), then try again"
    )


class SessionErrorAnswer:
    """Wraps the MCP endpoint: the SDK's terse answers to a missing or unknown session id (and to
    a full session table) keep their status and JSON-RPC code, and name the cause and the fix."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: Message | None = None
        body = b""

        async def answer(message: Message) -> None:
            nonlocal held, body
            if held is None:
                if message["type"] == "http.response.start" and any(
                    message["status"] == status for status, _ in _SESSION_ANSWERS
                ):
                    held = message  # an error body: small, and sent whole
                    return
                await send(message)
                return
            body += message.get("body", b"")
            if message.get("more_body", False):
                return
            start, held = held, None
            replaced = session_answer(start["status"], body)
            if replaced is None:
                await send(start)
                await send({"type": "http.response.body", "body": body})
                return
            await JSONResponse(replaced, status_code=start["status"])(scope, receive, send)

        await self.app(scope, receive, answer)


def session_answer(status: int, body: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(body)
        error = value["error"]
        kind = _SESSION_ANSWERS.get((status, error["message"]))
    except (ValueError, TypeError, KeyError):
        return None
    if kind is None:
        return None
    return {**value, "error": {**error, "message": session_error_text(kind)}}


class HandshakeEraGate:
    """Refuses 2026-07-28 per-request-era traffic, which has no session to own a conversation."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": UNSUPPORTED_PROTOCOL_VERSION,
                    "message": f"protocol version {version!r} is not served; use the initialize handshake",
                    "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
                },
            }
            await JSONResponse(body, status_code=400)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class RandomSessionIdManager(StreamableHTTPSessionManager):
    """The SDK's session manager with 256-bit session ids."""

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is None or transport.mcp_session_id is None:
            return transport
        # Re-key before any await: nothing has seen the SDK's uuid4 id yet.
        old = transport.mcp_session_id
        new = secrets.token_hex(32)
        transport.mcp_session_id = new
        self._server_instances[new] = self._server_instances.pop(old)
        if old in self._session_owners:
            self._session_owners[new] = self._session_owners.pop(old)
        return transport

    def watch(self, session_id: str | None) -> WhyEnded:
        """Why session ``session_id`` (open now) has ended, once it has: asked as a call of it is
        cancelled. The transport is taken now: an ended session is soon forgotten by id."""
        transport = self._server_instances.get(session_id) if session_id is not None else None

        def why() -> Ending | None:
            if transport is None:
                return None
            idle = transport.idle_scope
            if idle is not None and idle.cancel_called:
                return Ending(cause="session-expired", note=_duration(self.session_idle_timeout))
            if transport.is_terminated:
                return Ending(cause="session-ended")
            return None

        return why


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds / 60:g} minutes" if seconds >= 60 else f"{seconds:g} s"


def build_http_app(
    front_door: McpFrontDoor,
    settings: HttpSettings,
    *,
    routes: Sequence[BaseRoute] = (),
    middleware: Sequence[Middleware] = (),
    lifespans: Sequence[Lifespan] = (),
) -> Starlette:
    """The Starlette app of ``tether serve``: MCP at ``/mcp`` plus any extra routes (the panel).

    Extra ``middleware`` runs inside the Host/Origin guard; extra ``lifespans`` are entered after
    the MCP session manager has started and left before it stops.
    """
    names = settings.host_names()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names] + list(names),
        allowed_origins=[
            f"{scheme}://{name}{port}"
            for scheme in ("http", "https")
            for name in names
            for port in ("", ":*")
        ],
    )
    manager = RandomSessionIdManager(app=front_door.server, security_settings=security)
    front_door.session_watch = manager.watch
    endpoint = BearerGate(
        BodyTooLargeAnswer(
            SessionErrorAnswer(HandshakeEraGate(UniqueRequestIds(StreamableHTTPASGIApp(manager))))
        ),
        token=settings.token,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), contextlib.AsyncExitStack() as stack:
            for extra in lifespans:
                await stack.enter_async_context(extra(app))
            yield

    app = Starlette(
        routes=[Route(MCP_PATH, endpoint=endpoint), *routes],
        middleware=[Middleware(HostOriginGuard, names=names), *middleware],
        lifespan=lifespan,
    )
    app.state.tether_token = settings.token
    app.state.tether_front_door = front_door
    return app
