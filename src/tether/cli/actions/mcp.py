"""``tether mcp`` once the early front is answering: load the tools and hand the wire to the SDK.

Invariant: this process is one conversation. When the client closes stdin, or the process gets
SIGTERM or SIGHUP, every job of the conversation is killed before it exits (the catalog closes).
"""

from __future__ import annotations

import logging
import os
import signal

import anyio

from tether.config import Config
from tether.mcp.handshake import EarlyFront, HandshakeCache
from tether.mcp.server import McpFrontDoor
from tether.mcp.stdio import serve_stdio
from tether.mcp.wire import StdioWire
from tether.shell.sandbox import with_sandbox
from tether.tools.catalog import ToolCatalog, build_catalog

logger = logging.getLogger(__name__)

# A test seam: when set to a FIFO, the SDK takes over the wire only once a writer has closed it,
# so a test can act while the early front alone is answering (no timing involved).
HANDOVER_GATE = "TETHER_MCP_HANDOVER_GATE"


async def _stop_on_signal(catalog: ToolCatalog) -> None:
    # SIGTERM/SIGHUP (a client going away, a service manager) must still kill every job of this
    # conversation. The stdin reader is a thread blocked in read(2) that no cancellation reaches,
    # so close the catalog here, then leave at once.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            logger.info("received %s; stopping this conversation's jobs and exiting", name)
            with anyio.CancelScope(shield=True):
                await catalog.aclose()
            logging.shutdown()
            os._exit(128 + signum)


def _wait_for_gate() -> None:
    gate = os.environ.get(HANDOVER_GATE)
    if gate:
        with open(gate, "rb") as fifo:  # blocks until the test opens it for writing
            fifo.read()


async def _serve(
    config: Config, conversation: str, wire: StdioWire, early: EarlyFront, cache: HandshakeCache
) -> None:
    catalog = build_catalog(config)
    try:
        front_door = McpFrontDoor(
            catalog.registry, instructions=catalog.instructions(), conversation=conversation
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, catalog)
            await anyio.to_thread.run_sync(_wait_for_gate)
            await serve_stdio(front_door, wire=wire, early=early, cache=cache)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await catalog.aclose()


def serve(
    *,
    config: Config,
    sandbox: bool,
    conversation: str,
    wire: StdioWire,
    early: EarlyFront,
    cache: HandshakeCache,
) -> int:
    if sandbox:
        config = with_sandbox(config)
    logger.info("tether mcp serving conversation %s (pid %d)", conversation, os.getpid())
    anyio.run(_serve, config, conversation, wire, early, cache)
    return 0
