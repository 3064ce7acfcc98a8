"""The baseline of bench/startup.py: the smallest stdio MCP server the official SDK allows.

One tool, the SDK's own ``stdio_server`` transport and ``serve_loop``: the cost of starting the
SDK itself, which ``tether mcp`` is compared against.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server


async def _list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"word": {"type": "string"}}}
    return types.ListToolsResult(
        tools=[types.Tool(name="echo", description="Echo a word.", input_schema=schema)]
    )


async def _call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    word = str((params.arguments or {}).get("word", ""))
    return types.CallToolResult(content=[types.TextContent(text=word)])


SERVER: Server[Any] = Server("minimal", on_list_tools=_list_tools, on_call_tool=_call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await serve_loop(
            SERVER,
            read_stream,
            write_stream,
            lifespan_state={},
            init_options=SERVER.create_initialization_options(),
        )


if __name__ == "__main__":
    anyio.run(main)
