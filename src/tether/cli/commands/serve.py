"""``tether serve``: its arguments (``tether.cli.actions.serve`` serves).

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

import argparse

from tether.cli.lazy import handler


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve MCP over streamable HTTP on 127.0.0.1 (bearer token in $TETHER_HOME/token)",
        description="Serve the tether tools over MCP streamable HTTP at http://HOST:PORT/mcp. Every request "
        "needs 'Authorization: Bearer <token>' (the token is created in $TETHER_HOME/token on first start). "
        "The default address comes from config.toml [server] (127.0.0.1:8765).",
    )
    parser.add_argument("--host", help="address to bind (default [server].host, 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port to bind (default [server].port, 8765; 0 = any free port)"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding a non-loopback address (anyone reaching it with the token gets a shell)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra Host name clients may use (e.g. this machine's LAN name); repeatable",
    )
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help='confine the bash/pwsh tools in the bubblewrap sandbox (same as [shell].provider = "sandbox")',
    )
    parser.set_defaults(func=handler("tether.cli.actions.serve", "run"))
