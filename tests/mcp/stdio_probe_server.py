"""A ``tether mcp``-shaped stdio server with probe tools, for transport tests.

It runs the same pieces as ``tether mcp`` (``StdioWire.claim``, ``EarlyFront``, ``serve_stdio``
around an ``McpFrontDoor``) with tools that exercise the wire: stray writes to fd 1, a server →
client request (elicitation, roots), a log notification and a handler that waits to be cancelled.
Run as ``python stdio_probe_server.py MARKER_DIR``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from tether.mcp.handshake import EarlyFront, HandshakeCache
from tether.mcp.wire import StdioWire

MARKERS = Path(sys.argv[1])  # where the handshake cache goes
wire = StdioWire.claim()
early = EarlyFront(wire, None)
wire.start_reader(early.offer)

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext  # noqa: E402

from tether.mcp.server import McpFrontDoor  # noqa: E402
from tether.mcp.stdio import serve_stdio  # noqa: E402
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult  # noqa: E402

SCHEMA = {"type": "object", "properties": {}}


async def noise(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    os.write(1, b"raw bytes on fd 1\n")
    print("a stray print")
    sys.stdout.flush()
    await anyio.run_process(["sh", "-c", "echo from a child on its stdout"], stdout=None, check=True)
    return ToolResult(text="made noise")


async def log(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    assert ctx.notifier is not None
    await ctx.notifier.log("warning", "probe", {"said": "hello"})
    return ToolResult(text="logged")


async def hang(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    assert ctx.notifier is not None
    await ctx.notifier.log("info", "probe", "hang started")
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await ctx.notifier.log("info", "probe", "hang cancelled")
    raise AssertionError("unreachable")


async def ask(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    # Server → client requests need the request context, which tools do not get: a middleware.
    if ctx.method == "tools/call" and (ctx.params or {}).get("name") == "ask":
        answer = await ctx.session.elicit_form(
            "Allow the network for this command?",
            {"type": "object", "properties": {"allow": {"type": "boolean"}}, "required": ["allow"]},
        )
        roots = await ctx.session.list_roots()
        text = json.dumps(
            {"action": answer.action, "content": answer.content, "roots": [str(r.uri) for r in roots.roots]}
        )
        return {"content": [{"type": "text", "text": text}]}
    return await call_next(ctx)


registry = ToolRegistry()
for name, handler in (("noise", noise), ("log", log), ("hang", hang), ("ask", noise)):
    registry.add(ToolDef(name=name, description=name, input_schema=SCHEMA, handler=handler))
front = McpFrontDoor(registry, conversation="conv-probe")
front.server.middleware.append(ask)


async def main() -> None:
    await serve_stdio(front, wire=wire, early=early, cache=HandshakeCache(MARKERS, "probe"))


anyio.run(main)
wire.close_writer()
