"""Harness for MCP tests (tests/mcp and tests/tools): an in-process ``tether serve`` app on a real socket.

The server runs under uvicorn in the test's own event loop, on a socket bound to a free port
before the server starts, so the URL is known without parsing output. Clients are the official
SDK ``Client`` over streamable HTTP with the bearer token.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hang import HANG_S
from tether.errors import UsageError
from tether.mcp.http import HttpSettings, build_http_app
from tether.mcp.server import McpFrontDoor
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

TOKEN = "test-token-" + "x" * 32
# A raw JSON-RPC client's first request, and the headers of a POST to the endpoint (no token).
RAW_INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
RAW_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def raw_session(http: Any, url: str) -> dict[str, str]:
    """Initialize a session over ``http`` (an ``httpx`` client) with the token: the headers of its
    later requests."""
    headers = {**RAW_HEADERS, "Authorization": f"Bearer {TOKEN}"}
    opened = await http.post(url, json=RAW_INIT, headers=headers)
    session = {
        **headers,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    return session


def rpc_payload(response: Any) -> dict[str, Any]:
    """The JSON-RPC message of a response (``httpx``) sent as JSON or as one SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        value = json.loads(data[-1])
    else:
        value = json.loads(response.text)
    assert isinstance(value, dict)
    return value


@asynccontextmanager
async def serving(front_door: McpFrontDoor, *, token: str = TOKEN) -> AsyncIterator[str]:
    """Serve ``front_door`` over HTTP on 127.0.0.1:<free port>; yields the MCP URL."""
    app = build_http_app(front_door, HttpSettings(host="127.0.0.1", token=token))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(HANG_S):
                while not server.started:
                    await anyio.sleep(0.005)
            yield f"http://127.0.0.1:{port}/mcp"
            server.should_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def http_client(
    url: str,
    *,
    token: str = TOKEN,
    on_message: Callable[[IncomingMessage], None] | None = None,
    mode: str = "auto",
) -> AsyncIterator[Client]:
    async def handler(message: IncomingMessage) -> None:
        if on_message is not None:
            on_message(message)

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, message_handler=handler, mode=mode) as client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


class Probe:
    """Test tools whose behaviour the front door must map: ok, usage error, crash, hang."""

    def __init__(self) -> None:
        self.cancelled = anyio.Event()
        self.started = anyio.Event()
        self.actors: list[str] = []

    def registry(self) -> ToolRegistry:
        registry = ToolRegistry()
        schema = {"type": "object", "properties": {"word": {"type": "string"}}, "additionalProperties": False}
        out = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}
        registry.add(
            ToolDef(
                name="echo",
                description="Echo a word.",
                input_schema=schema,
                handler=self.echo,
                output_schema=out,
            )
        )
        registry.add(
            ToolDef(
                name="refuse", description="Always a usage error.", input_schema=schema, handler=self.refuse
            )
        )
        registry.add(
            ToolDef(name="crash", description="Always a bug.", input_schema=schema, handler=self.crash)
        )
        registry.add(
            ToolDef(name="hang", description="Never returns.", input_schema=schema, handler=self.hang)
        )
        return registry

    async def echo(self, arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        self.actors.append(ctx.actor)
        word = str(arguments.get("word", ""))
        return ToolResult(text=f"echo: {word}", structured={"echo": word})

    async def refuse(self, arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        raise UsageError("field 'word' must be one of: a, b")

    async def crash(self, arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        raise RuntimeError("secret internal detail")

    async def hang(self, arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        raise AssertionError("unreachable")
