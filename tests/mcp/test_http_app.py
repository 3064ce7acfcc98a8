"""The Starlette app of ``tether serve``: extra routes (the panel) sit behind the same Host/Origin guard."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx2
from mcp_harness import Probe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from tether.mcp.http import HttpSettings, build_http_app, is_loopback
from tether.mcp.server import McpFrontDoor


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("panel here")


async def test_extra_mounts_share_the_guard() -> None:
    started: list[str] = []

    @contextlib.asynccontextmanager
    async def panel_lifespan(app: Starlette) -> AsyncIterator[None]:
        started.append("panel")
        yield

    front = McpFrontDoor(Probe().registry())
    app = build_http_app(
        front,
        HttpSettings(host="0.0.0.0", token="t" * 32, allowed_hosts=("box.lan",)),
        routes=[Mount("/panel", routes=[Route("/hello", _hello)])],
        lifespans=[panel_lifespan],
    )
    async with app.router.lifespan_context(app):
        assert started == ["panel"]
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
            assert (await http.get("/panel/hello")).text == "panel here"
            assert (await http.get("/panel/hello", headers={"Host": "box.lan:8765"})).status_code == 200
            assert (await http.get("/panel/hello", headers={"Host": "[::1]:8765"})).status_code == 200
            assert (await http.get("/panel/hello", headers={"Host": "evil.example"})).status_code == 421
            assert (
                await http.get("/panel/hello", headers={"Origin": "https://evil.example"})
            ).status_code == 403
            assert (
                await http.get("/panel/hello", headers={"Origin": "http://box.lan:9000"})
            ).status_code == 200
            assert (await http.post("/mcp", json={})).status_code == 401


def test_loopback_detection() -> None:
    assert (
        is_loopback("127.0.0.1")
        and is_loopback("::1")
        and is_loopback("localhost")
        and is_loopback("127.1.2.3")
    )
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2") and not is_loopback("box.lan")
