"""The panel's Starlette app, mounted at ``/panel`` on the ``tether serve`` app.

Invariant: this module only routes. Pages and assets are static files, served as they were when
the panel was built (``assets``: an upgrade under a running server changes nothing a page
loads); the JSON API turns each
request into one tool call of ``PanelCalls`` (as actor ``panel``), the terminal socket runs the
shell host's terminal client, and ``PanelGuard`` (``auth``) stands in front of all of it.

    GET  /                          redirect to /panel/ (which redirects to the sign-in when needed)
    GET  /panel/login[?token=…]     sign in (the link tether serve prints), then redirect to /panel/
    POST /panel/login               the same with the token from the form
    POST /panel/logout              forget the cookie
    GET  /panel/                    the page (static/index.html); /panel/static/… its assets
    WS   /panel/ws/events           the live shell list, the pending approvals, the vault (pushed),
                                    and a heartbeat (``terminal.heartbeats``)
    WS   /panel/ws/term/<shell>     a terminal (see tether.panel.terminal)
    /panel/api/…                    JSON actions (see api.py)
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tether.config import Config
from tether.errors import UsageError
from tether.panel.api import api_routes
from tether.panel.approvals import approvals_stream
from tether.panel.assets import PanelAssets
from tether.panel.auth import BAD_TOKEN, PanelAuth, PanelGuard, served_names
from tether.panel.calls import PanelCalls
from tether.panel.shells import ShellFeed
from tether.panel.terminal import TerminalEndpoint, heartbeats
from tether.panel.vault import vault_stream
from tether.shells import Shells
from tether.store.db import Store
from tether.store.panel_people import PanelPeople
from tether.tools.registry import ToolRegistry

MOUNT: Final = "/panel"
STATIC_DIR: Final = Path(__file__).with_name("static")
VENDOR_FILES: Final = ("xterm.js", "xterm.css", "addon-fit.js", "addon-search.js", "addon-web-links.js")


def missing_assets(static_dir: Path = STATIC_DIR) -> str | None:
    """Why the panel cannot be served (its vendored xterm.js files are absent), or None.

    A wheel built with ``python -m build`` carries them (the build fetches them from the npm
    registry); a checkout gets them from ``make panel-assets``.
    """
    missing = [name for name in VENDOR_FILES if not (static_dir / "vendor" / name).is_file()]
    if not missing:
        return None
    return (
        f"its browser assets are missing ({', '.join(missing)} in {static_dir / 'vendor'}), so this "
        "copy of tether was installed without them. Install a wheel built with `python -m build` "
        "(the build fetches them from the npm registry), or run `make panel-assets` in a checkout"
    )


def check_assets(static_dir: Path = STATIC_DIR) -> None:
    reason = missing_assets(static_dir)
    if reason is not None:
        raise UsageError(f"the panel cannot be served: {reason}")


def unavailable_panel_routes(static_dir: Path = STATIC_DIR) -> list[BaseRoute]:
    """What ``/panel`` answers when the panel cannot be served: 503 and the reason, no assets."""

    async def unavailable(request: Request) -> Response:
        reason = missing_assets(static_dir) or "it was not started"
        body = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            "<title>tether panel — unavailable</title></head><body><main><h1>tether panel</h1>"
            f'<p role="alert">The panel is unavailable: {html.escape(reason)}.</p>'
            "<p>MCP is served at <code>/mcp</code> as usual.</p></main></body></html>"
        )
        return HTMLResponse(body, status_code=503, headers={"Cache-Control": "no-store"})

    return [
        Route("/", root_redirect),
        Route(MOUNT, unavailable),
        Route(MOUNT + "/{rest:path}", unavailable),
    ]


async def root_redirect(request: Request) -> Response:
    """``/`` and ``/panel``: the panel (whose guard sends a person without a cookie to sign in)."""
    return RedirectResponse(f"{MOUNT}/", status_code=307)


def login_url(base_url: str, token: str) -> str:
    """The one-time sign-in link ``tether serve`` prints (``base_url`` like http://127.0.0.1:8765)."""
    return f"{base_url.rstrip('/')}{MOUNT}/login?token={quote(token, safe='')}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelApp:
    """What ``tether serve`` needs to mount the panel: ``routes`` and ``lifespan`` for
    ``build_http_app`` (the lifespan closes the shells the panel's terminals used, on its loop,
    and the store of its people's access)."""

    routes: list[BaseRoute]
    auth: PanelAuth
    calls: PanelCalls
    feed: ShellFeed

    @asynccontextmanager
    async def lifespan(self, _app: object) -> AsyncIterator[None]:
        try:
            yield
        finally:
            try:
                await Shells.close_home(self.calls.config.home)
            finally:
                if self.auth.people is not None:  # the people's store, opened by build_panel_app
                    self.auth.people.store.close()


def build_panel_app(
    *,
    registry: ToolRegistry,
    config: Config,
    token: str,
    bind_host: str,
    extra_hosts: tuple[str, ...] = (),
    static_dir: Path = STATIC_DIR,
) -> PanelApp:
    """The panel as a sub-app behind ``PanelGuard``, ready to mount at ``/panel``."""
    check_assets(static_dir)
    assets = PanelAssets(static_dir)  # this build's, whatever replaces the files later
    people = PanelPeople(Store.open(config.home), config.home)
    auth = PanelAuth(token=token, names=served_names(bind_host, extra_hosts), people=people)
    calls = PanelCalls(registry=registry, config=config)
    feed = ShellFeed(calls=calls)
    terminal = TerminalEndpoint(calls=calls)

    async def index(request: Request) -> Response:
        return assets.response(request, "index.html", headers={"Cache-Control": "no-store"})

    async def login(request: Request) -> Response:
        if request.method == "POST":
            form = await request.form()
            presented = form.get("token")
        else:
            presented = request.query_params.get("token")
        if presented is not None:
            # A wrong, revoked, empty or overlong token: one answer, whichever it was.
            signed = auth.sign_in(presented) if isinstance(presented, str) else None
            if signed is None:
                return _login_page(BAD_TOKEN, 401)
            session, cookie = signed
            await calls.audit(action="login", who=session.who)
            return auth.login_response(MOUNT, cookie)
        current, why = auth.session(request.headers)
        if current is not None:
            return RedirectResponse(f"{MOUNT}/", status_code=303)
        # A page sent here because its person's access was revoked says so.
        return _login_page(why if "revoked" in why else "", 200)

    async def logout(request: Request) -> Response:
        return auth.logout_response(MOUNT)

    async def events(websocket: WebSocket) -> None:
        await websocket.accept()

        sending = anyio.Lock()  # three streams (shells, approvals, vault), one message at a time

        async def push(stream: AsyncIterator[str], scope: anyio.CancelScope) -> None:
            try:
                async for message in stream:
                    async with sending:
                        await websocket.send_text(message)
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass
            scope.cancel()

        # The page sends nothing; reading is how a closed page is noticed while the list is quiet.
        async with anyio.create_task_group() as tg:
            tg.start_soon(push, heartbeats(), tg.cancel_scope)
            tg.start_soon(push, feed.stream(), tg.cancel_scope)
            tg.start_soon(push, approvals_stream(calls), tg.cancel_scope)
            tg.start_soon(push, vault_stream(calls), tg.cancel_scope)
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass
            tg.cancel_scope.cancel()

    inner = Starlette(
        routes=[
            Route("/", index),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/static/{path:path}", assets.static),
            WebSocketRoute("/ws/events", events),
            # Any text as the id (an encoded "/" too): the endpoint refuses it in the cell, by name.
            WebSocketRoute("/ws/term/{shell:path}", terminal.serve),
            Mount("/api", routes=api_routes(calls=calls, feed=feed)),
        ],
        middleware=[Middleware(PanelGuard, auth=auth)],
    )
    routes: list[BaseRoute] = [
        Route("/", root_redirect),
        Route(MOUNT, root_redirect),
        Mount(MOUNT, app=inner),
    ]
    return PanelApp(routes=routes, auth=auth, calls=calls, feed=feed)


def _login_page(message: str, status: int) -> HTMLResponse:
    note = f'<p class="note verify-bad" role="alert">{html.escape(message)}</p>' if message else ""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tether panel — sign in</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="static/app.css"></head>
<body class="login-page"><main class="login" id="login">
<h1>tether panel</h1>
<p>Open the link <code>tether serve</code> printed,
or paste the token from <code>$TETHER_HOME/token</code>.</p>
{note}
<form method="post" action="login" class="stack">
<label>Token <input name="token" type="password" autocomplete="off" required autofocus></label>
<button type="submit">Sign in</button>
</form></main></body></html>"""
    # same-origin, not the panel's usual no-referrer: with no-referrer a browser posts the form
    # with ``Origin: null``, which the server refuses as it must. Its own URL holds no token.
    headers = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin"}
    return HTMLResponse(body, status_code=status, headers=headers)
