"""Who may use the panel: the token once, then a cookie; same-origin only.

Invariants:

- The only way in is the serve token, presented once to ``/panel/login`` (the link ``tether serve``
  prints, or the form there). It is exchanged for an HttpOnly, ``SameSite=Strict`` cookie whose
  value is an HMAC of the token — the cookie never holds the bearer token itself, and a new token
  (delete ``$TETHER_HOME/token``) invalidates every cookie. The login answer redirects at once, so
  the token leaves the address bar and history, and ``Referrer-Policy: no-referrer`` keeps it out
  of any ``Referer``.
- Every request and WebSocket handshake is checked here, independently of the app-wide Host/Origin
  guard in front of it: ``Host`` must be a served name, a present ``Origin`` must be one of those
  names, and a state-changing request (anything but GET/HEAD) or WebSocket must prove it is
  same-origin — by ``Origin``, or by ``Sec-Fetch-Site: same-origin`` when a browser sent no Origin.
  JSON endpoints also require ``Content-Type: application/json``, which a cross-site form cannot send.
- Everything but the login page and the static assets needs the cookie: pages redirect to the
  login page, API calls get 401, WebSockets are closed before they are accepted (HTTP 403).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Final

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

COOKIE_NAME: Final = "tether_panel"
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
# Paths (below the panel's mount) that need no cookie.
PUBLIC_PATHS: Final = ("/login", "/static/")

SECURITY_HEADERS: Final = {
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # xterm.js injects <style> elements for its renderer, hence 'unsafe-inline' for styles only.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
}


def session_cookie_value(token: str) -> str:
    """What the cookie carries: proves knowledge of the token without being usable as a bearer."""
    return hmac.new(token.encode(), b"tether-panel-session-v1", hashlib.sha256).hexdigest()


def token_matches(presented: str, token: str) -> bool:
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def host_name(value: str) -> str:
    """A ``Host`` value (or an origin's authority) without its port, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def served_names(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names the panel answers to: loopback names, the bound address, and any extra names."""
    names = {*LOOPBACK_NAMES, *extra}
    if bind_host not in ("0.0.0.0", "::", ""):
        try:
            is_v6 = ipaddress.ip_address(bind_host).version == 6
        except ValueError:
            is_v6 = False
        names.add(f"[{bind_host}]" if is_v6 else bind_host)
    return frozenset(name.lower() for name in names)


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelAuth:
    token: str
    names: frozenset[str]
    secure_cookie: bool = False  # set when served over https

    @property
    def cookie_value(self) -> str:
        return session_cookie_value(self.token)

    def origin_ok(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and host_name(rest.split("/", 1)[0]) in self.names

    def has_session(self, headers: Headers) -> bool:
        raw = headers.get("cookie")
        if not raw:
            return False
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except Exception:  # a malformed Cookie header is simply "no session"
            return False
        morsel = jar.get(COOKIE_NAME)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.cookie_value.encode())

    def login_response(self, mount: str) -> Response:
        response = RedirectResponse(f"{mount}/", status_code=303, headers=_no_store())
        response.set_cookie(
            COOKIE_NAME,
            self.cookie_value,
            path=mount or "/",
            httponly=True,
            samesite="strict",
            secure=self.secure_cookie,
        )
        return response

    def logout_response(self, mount: str) -> Response:
        response = RedirectResponse(f"{mount}/login", status_code=303, headers=_no_store())
        response.delete_cookie(COOKIE_NAME, path=mount or "/", httponly=True, samesite="strict")
        return response


def _no_store() -> dict[str, str]:
    return {"Cache-Control": "no-store", **SECURITY_HEADERS}


class PanelGuard:
    """ASGI middleware around the panel app enforcing the rules in the module docstring."""

    def __init__(self, app: ASGIApp, *, auth: PanelAuth) -> None:
        self.app = app
        self.auth = auth

    def check(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        """``(status, message)`` when the request must be refused, else ``None``."""
        host = headers.get("host", "")
        if host_name(host) not in self.auth.names:
            return (
                421,
                f"Host {host[:100]!r} is not served here; open the panel at the address tether serve printed",
            )
        origin = headers.get("origin")
        if origin is not None and not self.auth.origin_ok(origin):
            return 403, f"Origin {origin[:100]!r} is not allowed; the panel only accepts same-origin requests"
        unsafe = scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS
        if unsafe and origin is None and headers.get("sec-fetch-site") != "same-origin":
            return 403, "a state-changing request must come from the panel's own page (no Origin header)"
        if scope["type"] == "http" and unsafe and _is_api(scope):
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return 415, "panel API requests must be sent as Content-Type: application/json"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = self.check(scope, headers)
        if refused is None and not _is_public(scope) and not self.auth.has_session(headers):
            refused = (401, "not signed in; open the login link tether serve printed")
        if refused is None:
            await self.app(scope, receive, _with_security_headers(send))
            return
        status, message = refused
        logger.warning("panel refused %s %s: %s", scope["type"], scope.get("path", ""), message)
        if scope["type"] == "websocket":
            # Closing before accept makes the server answer the handshake with HTTP 403.
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        if status == 401 and not _is_api(scope) and scope.get("method") in SAFE_METHODS:
            response: Response = RedirectResponse(f"{scope.get('root_path', '')}/login", status_code=303)
        elif _is_api(scope):
            response = JSONResponse({"error": "refused", "message": message}, status_code=status)
        else:
            response = PlainTextResponse(message, status_code=status)
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        await response(scope, receive, send)


def _sub_path(scope: Scope) -> str:
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _is_public(scope: Scope) -> bool:
    sub = _sub_path(scope)
    return any(sub == p or (p.endswith("/") and sub.startswith(p)) for p in PUBLIC_PATHS)


def _is_api(scope: Scope) -> bool:
    return _sub_path(scope).startswith("/api/")


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[tuple[bytes, bytes]] = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            for name, value in SECURITY_HEADERS.items():
                if name.lower().encode() not in present:
                    headers.append((name.lower().encode(), value.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped
