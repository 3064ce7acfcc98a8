"""Harness for panel tests: the ``tether serve`` app (MCP + panel) in-process on a real socket.

The server runs under uvicorn in the test's event loop on a socket bound before it starts, exactly
as ``tether serve`` assembles it: ``build_http_app`` with the panel's routes. HTTP requests use
``httpx2`` (what the MCP SDK ships), WebSockets the ``websockets`` client.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hang import HANG_S
from tether.config import Config, ensure_home, load_config
from tether.mcp.http import HttpSettings, build_http_app
from tether.mcp.server import McpFrontDoor
from tether.panel.app import STATIC_DIR, PanelApp, build_panel_app
from tether.panel.auth import COOKIE_NAME
from tether.tools.catalog import build_catalog
from tether.tools.registry import ToolRegistry

TOKEN = "panel-test-token-" + "y" * 32


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    base: str  # http://127.0.0.1:PORT
    port: int
    panel: PanelApp
    config: Config

    @property
    def origin(self) -> str:
        return self.base

    @property
    def ws_base(self) -> str:
        return self.base.replace("http://", "ws://")

    def cookie_header(self) -> str:
        return f"{COOKIE_NAME}={self.panel.auth.cookie_value}"


@asynccontextmanager
async def serving(
    home: Path,
    registry: ToolRegistry | None = None,
    *,
    token: str = TOKEN,
    port: int = 0,
    static_dir: Path = STATIC_DIR,
) -> AsyncIterator[Served]:
    """The app on ``port`` (0: any free one; a fixed one lets a test restart the server where the
    page expects it), serving the page and assets of ``static_dir``."""
    ensure_home(home)
    config = load_config(home)
    registry = registry if registry is not None else ToolRegistry()
    panel = build_panel_app(
        registry=registry, config=config, token=token, bind_host="127.0.0.1", static_dir=static_dir
    )
    front_door = McpFrontDoor(registry)
    app = build_http_app(
        front_door,
        HttpSettings(host="127.0.0.1", token=token),
        routes=panel.routes,
        lifespans=[panel.lifespan],
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="websockets-sansio"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(HANG_S):
                while not server.started:
                    await anyio.sleep(0.005)
            yield Served(base=f"http://127.0.0.1:{port}", port=port, panel=panel, config=config)
            server.should_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def browserless(served: Served, *, signed_in: bool = True) -> AsyncIterator[httpx2.AsyncClient]:
    """An HTTP client that behaves like the panel's own page (same Origin, cookie when signed in)."""
    headers = {"Origin": served.origin}
    if signed_in:
        headers["Cookie"] = served.cookie_header()
    async with httpx2.AsyncClient(base_url=served.base, headers=headers, follow_redirects=False) as client:
        yield client


def free_port() -> int:
    """A port free on loopback now, for a server that must come back where a page expects it
    (a restart); chosen by the system, so two runs of the suite never reach for the same one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@asynccontextmanager
async def serving_tools(home: Path, *, token: str = TOKEN, port: int = 0) -> AsyncIterator[Served]:
    """``serving`` with the real tool catalog, as ``tether serve`` builds it."""
    ensure_home(home)
    catalog = build_catalog(load_config(home), with_jobs=False)
    try:
        async with serving(home, catalog.registry, token=token, port=port) as served:
            yield served
    finally:
        with anyio.CancelScope(shield=True):
            await catalog.aclose()


@asynccontextmanager
async def agent(
    served: Served, *, token: str = TOKEN, client_info: types.Implementation | None = None
) -> AsyncIterator[Client]:
    """An agent: the official MCP SDK client over streamable HTTP with the bearer token."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        transport = streamable_http_client(f"{served.base}/mcp", http_client=http)
        async with Client(transport, client_info=client_info) as client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def open_shells(client: Client, count: int = 1, **action: Any) -> list[str]:
    """Shells opened by the agent (``shell_open``), their ids."""
    result = await client.call_tool(
        "shell_open", {"tasks": [{"action": {"kind": "open", "count": count, **action}}]}
    )
    assert not result.is_error, text_of(result)
    return [t["shell"] for t in (result.structured_content or {})["tasks"]]


async def run_in(client: Client, shell: str, command: str, wait: str = "exit") -> dict[str, Any]:
    """One ``shell_run`` by the agent; its task entry."""
    result = await client.call_tool(
        "shell_run",
        {
            "tasks": [
                {
                    "target": {"sessions": shell},
                    "action": {"kind": "run", "command": command},
                    "wait": {"kind": wait},
                }
            ]
        },
    )
    task: dict[str, Any] = (result.structured_content or {})["tasks"][0]
    return task
