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
- A person with access of their own (``tether panel add``: ``tether.store.panel_people``, which
  keeps only the token's hash) signs in with their token instead; their cookie names them and holds
  an HMAC, keyed with the serve token, of their name and their token's hash — so neither the
  database nor an old cookie of a name given new access signs anyone in. Each request runs as that
  person (``calls.ACTING``: the audit log's actor ``panel:NAME``). A revoked person's next request
  is refused with a message that says so, and their open sockets are closed at once (1008) when
  ``$TETHER_HOME/panel/people`` changes: the page then opens the sign-in page, which says why.
  A wrong, revoked, empty or overlong token is refused with one message, whichever it was.
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

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.panel.calls import ACTING
from tether.store.close_watch import CloseWatch
from tether.store.panel_people import MAX_TOKEN_CHARS, PEOPLE_FILE, PanelPeople, PanelPerson

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
    presented = presented.strip()
    if len(presented) > MAX_TOKEN_CHARS or not presented.isascii():
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


PERSON_COOKIE_PREFIX: Final = "p."
_FALLBACK_S = 1.0  # only without inotify: how often an open socket re-checks its person's access
NOT_SIGNED_IN: Final = "not signed in; open the login link tether serve printed"
BAD_TOKEN: Final = (
    "That token does not sign in here: it is not this server's token, nor a person's panel access "
    "that is still valid (tether panel list). Use the link tether serve printed, or the token "
    "tether panel add gave you."
)


def person_cookie_value(token: str, person: PanelPerson) -> str:
    """A named person's cookie: their name, and an HMAC (keyed with the serve token) of it and of
    their token's hash. New access for the name (a new hash) or a new serve token voids it."""
    name, digest = person.name.lower().encode(), person.token_sha256.encode()
    message = b"tether-panel-person-v1\0" + name + b"\0" + digest
    mac = hmac.new(token.encode(), message, hashlib.sha256).hexdigest()
    return f"{PERSON_COOKIE_PREFIX}{person.name.encode().hex()}.{mac}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """Who a request comes from: ``who`` names a person with access of their own; None is whoever
    holds the serve token (``person at the panel``)."""

    who: str | None


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
    people: PanelPeople | None = None
    secure_cookie: bool = False  # set when served over https

    @property
    def cookie_value(self) -> str:
        return session_cookie_value(self.token)

    def sign_in(self, presented: str) -> tuple[Session, str] | None:
        """The session and cookie value a presented token earns, or None (one answer for a wrong,
        revoked, empty or overlong token)."""
        if token_matches(presented, self.token):
            return Session(who=None), self.cookie_value
        person = self.people.person_of_token(presented.strip()) if self.people is not None else None
        if person is None:
            return None
        return Session(who=person.name), person_cookie_value(self.token, person)

    def session(self, headers: Headers) -> tuple[Session | None, str]:
        """The request's session, or None and why (``NOT_SIGNED_IN``, or that access was revoked)."""
        value = _cookie(headers)
        if value is None:
            return None, NOT_SIGNED_IN
        if not value.startswith(PERSON_COOKIE_PREFIX):
            if hmac.compare_digest(value.encode(), self.cookie_value.encode()):
                return Session(who=None), ""
            return None, NOT_SIGNED_IN
        person = self._person_of_cookie(value)
        if person is None:
            return None, NOT_SIGNED_IN
        if not person.active:
            return None, (
                f"the panel access of {person.name} was revoked; ask whoever runs tether for new "
                f"access (tether panel add {person.name})"
            )
        return Session(who=person.name), ""

    def _person_of_cookie(self, value: str) -> PanelPerson | None:
        """The person (active or revoked) whose valid cookie ``value`` is; None for anything else."""
        hexname, _, _mac = value[len(PERSON_COOKIE_PREFIX) :].partition(".")
        if self.people is None or len(hexname) > 256:
            return None
        try:
            name = bytes.fromhex(hexname).decode("ascii")
        except (ValueError, UnicodeDecodeError):
            return None
        person = self.people.get(name) if name else None
        if person is None:
            return None
        if not hmac.compare_digest(value.encode(), person_cookie_value(self.token, person).encode()):
            return None
        return person

    def origin_ok(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and host_name(rest.split("/", 1)[0]) in self.names

    def has_session(self, headers: Headers) -> bool:
        return self.session(headers)[0] is not None

    def login_response(self, mount: str, cookie_value: str | None = None) -> Response:
        response = RedirectResponse(f"{mount}/", status_code=303, headers=_no_store())
        response.set_cookie(
            COOKIE_NAME,
            cookie_value if cookie_value is not None else self.cookie_value,
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


def _cookie(headers: Headers) -> str | None:
    raw = headers.get("cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed Cookie header is simply "no session"
        return None
    morsel = jar.get(COOKIE_NAME)
    return morsel.value if morsel is not None else None


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
        session: Session | None = None
        if refused is None and not _is_public(scope):
            session, why = self.auth.session(headers)
            if session is None:
                refused = (401, why)
        if refused is None:
            acting = ACTING.set(session.who if session is not None else None)
            try:
                if scope["type"] == "websocket" and session is not None and session.who is not None:
                    await self._while_allowed(scope, receive, send, headers, session.who)
                else:
                    await self.app(scope, receive, _with_security_headers(send))
            finally:
                ACTING.reset(acting)
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

    async def _while_allowed(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers, who: str
    ) -> None:
        """A named person's socket, closed (1008, saying why) the moment their access ends."""
        ended: list[str] = []
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                ended.append(await self._access_ends(headers))
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await self.app(scope, receive, send)
            tg.cancel_scope.cancel()
        if ended:
            logger.warning("panel closed a socket of %s: %s", who, ended[0])
            try:
                await send({"type": "websocket.close", "code": 1008, "reason": ended[0][:120]})
            except Exception:  # the socket closed meanwhile
                logger.debug("socket of %s already closed", who, exc_info=True)

    async def _access_ends(self, headers: Headers) -> str:
        """Wait until the request's session no longer holds; why it ended."""
        people = self.auth.people
        assert people is not None
        people.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        event = CloseWatch.register(people.dir, PEOPLE_FILE)
        try:
            while True:
                if event is not None:
                    event.clear()
                session, why = self.auth.session(headers)
                if session is None:
                    return why
                if event is None:
                    await anyio.sleep(_FALLBACK_S)
                else:
                    await event.wait()
        finally:
            if event is not None:
                CloseWatch.unregister(people.dir, PEOPLE_FILE, event)


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
