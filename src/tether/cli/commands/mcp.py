"""``tether mcp``: serve one MCP conversation over stdio, answering the handshake at once.

Invariant: until ``tether.cli.actions.mcp`` is imported, only the standard library and tether's light
modules run. In that time the configuration is read, the process's own credentials are sealed
away (``tether.process.seal``, before any thread exists), the wire is claimed (stdout carries
MCP only from here on), the reader thread starts, and ``initialize`` / ``tools/list`` are
answered from the handshake cache (``tether.mcp.handshake``) while the SDK and the tools load
(and the command container starts).

The conversation id is ``$TETHER_CONVERSATION`` when set (so a restarted client keeps owning its
shells), else a fresh random one. Logs go to stderr and ``$TETHER_HOME/logs/mcp.log``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fast path (tether.cli.main) runs without argparse
    import argparse


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


def run(args: argparse.Namespace) -> int:
    return serve(sandbox=bool(args.sandbox))


def serve(*, sandbox: bool) -> int:
    from tether.config import load_config
    from tether.home import ensure_home, resolve_home
    from tether.mcp.handshake import CACHE_FORMAT, EarlyFront, HandshakeCache
    from tether.mcp.ids import conversation_id
    from tether.mcp.logs import configure_logging
    from tether.mcp.wire import StdioWire
    from tether.process.seal import seal_environment
    from tether.stamp import build_key

    home = ensure_home(resolve_home())
    conversation = conversation_id(os.environ.get("TETHER_CONVERSATION", ""))
    config = load_config(home)  # a bad config.toml is refused before anything is answered
    seal_environment(config.env)  # before any thread (the wire's), child or tmux server exists
    configure_logging(home, "mcp")
    wire = StdioWire.claim()
    flags = ("--sandbox",) if sandbox else ()
    cache = HandshakeCache(home, build_key(home, ("mcp-handshake", str(CACHE_FORMAT), *flags)))
    early = EarlyFront(wire, cache.load())
    wire.start_reader(early.offer)
    # The command container's PID 1 (a small Python process) starts on another core while the SDK
    # loads, so the first one-shot command does not wait for it.
    from tether.process.container import prepare as prepare_container

    prepare_container()

    from tether.cli.actions import mcp as actions  # the SDK and the tools: about a second

    try:
        return actions.serve(
            config=config, sandbox=sandbox, conversation=conversation, wire=wire, early=early, cache=cache
        )
    finally:
        wire.close_writer()
