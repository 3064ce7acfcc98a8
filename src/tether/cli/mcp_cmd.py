"""``tether mcp``: serve one MCP conversation over stdio.

The conversation id is ``$TETHER_CONVERSATION`` when set (so a restarted client keeps owning its
shells), else a fresh random one. Nothing but MCP goes to stdout; logs go to stderr and
``$TETHER_HOME/logs/mcp.log``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal

import anyio

from tether.config import Config, ensure_home, load_config, resolve_home
from tether.errors import UsageError
from tether.mcp.logs import configure_logging
from tether.mcp.server import McpFrontDoor, new_conversation_id
from tether.mcp.stdio import serve_stdio
from tether.process.seal import seal_environment
from tether.shell.sandbox import with_sandbox
from tether.tools.catalog import ToolCatalog, build_catalog

logger = logging.getLogger(__name__)

_CONVERSATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve MCP over stdio (one conversation; for Claude Code, Claude Desktop, Cursor, ...)",
        description="Serve the tether tools over MCP on stdin/stdout. The conversation id is "
        "$TETHER_CONVERSATION if set, else a new random one. "
        "Logs go to stderr and $TETHER_HOME/logs/mcp.log.",
    )
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help='confine the bash/pwsh tools in the bubblewrap sandbox (same as [shell].provider = "sandbox")',
    )
    parser.set_defaults(func=run)


def conversation_from_env() -> str:
    value = os.environ.get("TETHER_CONVERSATION", "").strip()
    if not value:
        return new_conversation_id()
    if not _CONVERSATION.match(value):
        raise UsageError(
            f"TETHER_CONVERSATION={value[:40]!r} is not a valid conversation id; use 1-128 characters "
            "from A-Z a-z 0-9 . _ : - starting with a letter or digit"
        )
    return value


async def _stop_on_signal(catalog: ToolCatalog) -> None:
    # SIGTERM/SIGHUP (a client going away, a service manager) must still kill every job of this
    # conversation. The loop cannot simply be cancelled: the SDK reads stdin in a worker thread that
    # a cancellation cannot interrupt, so it would wait for an EOF that may never come. Close the
    # catalog here, then leave at once.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            logger.info("received %s; stopping this conversation's jobs and exiting", name)
            with anyio.CancelScope(shield=True):
                await catalog.aclose()
            logging.shutdown()
            os._exit(128 + signum)


async def _serve(config: Config, conversation: str) -> None:
    catalog = build_catalog(config)
    try:
        front_door = McpFrontDoor(
            catalog.registry, instructions=catalog.instructions(), conversation=conversation
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, catalog)
            await serve_stdio(front_door)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await catalog.aclose()


def run(args: argparse.Namespace) -> int:
    home = ensure_home(resolve_home())
    config = load_config(home)
    if args.sandbox:
        config = with_sandbox(config)
    conversation = conversation_from_env()
    seal_environment(config.env)  # before any thread, child or tmux server exists
    configure_logging(home, "mcp")
    logger.info("tether mcp serving conversation %s (pid %d)", conversation, os.getpid())
    anyio.run(_serve, config, conversation)
    return 0
