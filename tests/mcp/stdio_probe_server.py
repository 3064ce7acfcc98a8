"""A ``tether mcp``-shaped stdio server with probe tools, for transport tests.

It runs the same pieces as ``tether mcp`` (``StdioWire.claim``, ``EarlyFront``, ``serve_stdio``
around an ``McpFrontDoor``) with tools that exercise the wire: stray writes to fd 1, a server →
client request (elicitation, roots), a log notification and a handler that waits to be cancelled.
Run as ``python stdio_probe_server.py MARKER_DIR [direct]``: with ``direct`` the server carries no
middleware of its own, so plain calls are answered beside the SDK (``tether.mcp.direct``); ``where``
says which path served it, ``confirm`` asks the person at the client, and ``hang`` leaves a
line ``cancelled`` in MARKER_DIR/order once its cancellation has run (the conversation's end
writes ``ended`` there); ``shape`` and ``typed`` return the result ``kind`` names.
"""

from __future__ import annotations

import inspect
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
DIRECT = sys.argv[2:] == ["direct"]
wire = StdioWire.claim()
early = EarlyFront(wire, None)
wire.start_reader(early.offer)

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext  # noqa: E402

from tether.errors import UsageError  # noqa: E402
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
            await anyio.sleep(0.2)  # a handler that takes a while to clean up is waited for
            with (MARKERS / "order").open("a") as order:
                order.write("cancelled\n")
            await ctx.notifier.log("info", "probe", "hang cancelled")
    raise AssertionError("unreachable")


async def where(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    files = {Path(frame.filename).as_posix() for frame in inspect.stack()}
    direct = any(f.endswith("tether/mcp/direct.py") for f in files)
    sdk = any(f.endswith("mcp/server/runner.py") for f in files)
    return ToolResult(text="direct" if direct and not sdk else "sdk" if sdk and not direct else "unclear")


async def confirm(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    if ctx.person is None:
        return ToolResult(text="nobody to ask")
    reply = await ctx.person.confirm("Run the probe?", timeout_s=20)
    return ToolResult(text=f"{reply.outcome} {reply.reason}".strip(), structured={"who": ctx.person.who})


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


SHAPES: dict[str, ToolResult] = {
    "plain": ToolResult(text="héllo ✓\n", structured={"a": None, "b": [1, 2.5, "x"], "c": {"d": True}}),
    "error": ToolResult(text="E: it failed", is_error=True, structured={"x": 1}),
    "empty": ToolResult(text="", structured={}),
    "text": ToolResult(text="only text"),
    "surrogate": ToolResult(text="a lone surrogate: \udcff"),
}


async def shape(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
    kind = arguments["kind"]
    if kind == "refused":
        raise UsageError("kind 'refused' is refused; use another kind")
    if kind == "crash":
        raise RuntimeError("a bug")
    return SHAPES[kind]


async def ended(conversation: str) -> None:
    with (MARKERS / "order").open("a") as order:
        order.write("ended\n")


registry = ToolRegistry()
TOOLS = (("noise", noise), ("log", log), ("hang", hang), ("ask", noise))
for name, handler in (*TOOLS, ("where", where), ("confirm", confirm)):
    registry.add(ToolDef(name=name, description=name, input_schema=SCHEMA, handler=handler))
KIND = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
for name, output in (("shape", None), ("typed", {"type": "object"})):
    registry.add(ToolDef(name=name, description=name, input_schema=KIND, output_schema=output, handler=shape))
front = McpFrontDoor(registry, conversation="conv-probe", on_conversation_end=ended)
if not DIRECT:
    front.server.middleware.append(ask)


async def main() -> None:
    await serve_stdio(front, wire=wire, early=early, cache=HandshakeCache(MARKERS, "probe"))


anyio.run(main)
wire.close_writer()
