"""``tether mcp`` once the early front is answering: load the tools and hand the wire to the SDK.

Invariant: this process is one conversation. When the client closes stdin, or the process gets
SIGTERM, SIGHUP or SIGINT (also while the shutdown is under way), every job of the conversation
is killed before it exits (the catalog closes; after a signal, what ignores SIGTERM gets SIGKILL
within ``_SIGNALLED_GRACE_S``). After a signal, the calls in flight are cancelled first, and each
is audited as ended by it (``server-stopped``), within the same grace.
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
from tether.process.tree import kill_live_trees
from tether.shell.sandbox import with_sandbox
from tether.tools.catalog import ToolCatalog, build_catalog

logger = logging.getLogger(__name__)

# A test seam: when set to a FIFO, the SDK takes over the wire only once a writer has closed it,
# so a test can act while the early front alone is answering (no timing involved).
HANDOVER_GATE = "TETHER_MCP_HANDOVER_GATE"
# After a stop signal, how long commands get between SIGTERM and SIGKILL: an MCP client kills its
# server 2 s after SIGTERM (the SDK's FORCE_KILL_TIMEOUT), the server's own end included.
_SIGNALLED_GRACE_S = 1.0


class _Serving:
    """The conversation being served, as a stop signal reaches it."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.over = anyio.Event()  # its calls have ended (and are audited), its jobs are killed


async def _stop_on_signal(catalog: ToolCatalog, serving: _Serving) -> None:
    # SIGTERM/SIGHUP (a client going away, a service manager) and SIGINT must still end every
    # command of this conversation, also during the shutdown that closing stdin began (this
    # receiver lives until that is over: without it a signal then ended the process at once,
    # and a tether without a command container left its jobs running). A client kills the server
    # 2 s after SIGTERM, so the commands get a short grace, then SIGKILL. The stdin reader is a
    # thread blocked in read(2) that no cancellation reaches, so leave at once.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            logger.info("received %s; stopping this conversation's calls and jobs and exiting", name)
            # The calls in flight are cancelled and audited as ended by this signal (they were
            # left to the exit below, unaudited, a killed command's even audited "ok").
            catalog.stop.begin(name)
            serving.scope.cancel()
            with anyio.move_on_after(_SIGNALLED_GRACE_S, shield=True):
                await serving.over.wait()
                await catalog.aclose()
            kill_live_trees()
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
    serving = _Serving()
    async with anyio.create_task_group() as tg:
        # Started first and cancelled last: a stop signal is handled until the jobs are ended.
        tg.start_soon(_stop_on_signal, catalog, serving)
        catalog.start()
        try:
            front_door = McpFrontDoor(
                catalog.registry, instructions=catalog.instructions(), conversation=conversation
            )
            with serving.scope:
                await anyio.to_thread.run_sync(_wait_for_gate)
                await serve_stdio(front_door, wire=wire, early=early, cache=cache)
        finally:
            with anyio.CancelScope(shield=True):
                await catalog.aclose()
            serving.over.set()
            tg.cancel_scope.cancel()


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
