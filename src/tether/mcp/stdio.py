"""``tether mcp``: one MCP conversation over the process's stdin and stdout.

Invariant: stdout carries only MCP messages. The SDK's ``stdio_server`` points fd 1 at stderr
while serving, so a child process or a stray ``print`` cannot corrupt the wire. The handshake
loop (not the dual-era loop) is used on purpose: see ``tether.mcp.server`` on protocol eras.
"""

from __future__ import annotations

import logging

from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

from tether.mcp.server import McpFrontDoor

logger = logging.getLogger(__name__)


async def serve_stdio(front_door: McpFrontDoor) -> None:
    """Serve one conversation until the client closes stdin."""
    server = front_door.server
    async with server.lifespan(server) as state, stdio_server() as (read_stream, write_stream):
        await serve_loop(
            server,
            read_stream,
            write_stream,
            lifespan_state=state,
            init_options=front_door.initialization_options(),
        )
    logger.info("stdio client closed the connection")
