"""The ``Notifier`` a tool gets over MCP: one per connection (one conversation).

Invariant: a ``notifications/resources/updated`` reaches a client only for a URI that client
subscribed to on this connection (MCP ``resources/subscribe``); anything else would be an
unrequested notification. Sending never raises: a client that went away simply stops hearing,
so a tool that holds a notifier beyond its call cannot be broken by a closed stream.
"""

from __future__ import annotations

import logging
from typing import Any, Final, get_args

from mcp.server.connection import Connection
from mcp_types import LoggingLevel

logger = logging.getLogger(__name__)

_LEVELS: Final[frozenset[str]] = frozenset(get_args(LoggingLevel))
_SUBSCRIPTIONS_KEY: Final = "tether.subscriptions"


def subscriptions(connection: Connection) -> set[str]:
    """The resource URIs this connection subscribed to (kept in the connection's scratch state)."""
    found = connection.state.get(_SUBSCRIPTIONS_KEY)
    if not isinstance(found, set):
        found = set()
        connection.state[_SUBSCRIPTIONS_KEY] = found
    return found


class ConnectionNotifier:
    """Sends resource updates and log messages to one MCP connection's standalone channel."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    async def resource_updated(self, uri: str) -> None:
        if uri not in subscriptions(self._connection):
            return
        await self._send("notifications/resources/updated", {"uri": uri})

    async def log(self, level: str, logger: str, data: Any) -> None:
        # An unknown level would make the client reject the whole notification; "info" keeps it.
        wire_level = level if level in _LEVELS else "info"
        await self._send("notifications/message", {"level": wire_level, "logger": logger, "data": data})

    async def _send(self, method: str, params: dict[str, Any]) -> None:
        try:
            await self._connection.notify(method, params)
        except Exception:  # a client-side failure must never reach the tool that notified
            logger.debug("dropped %s: connection unavailable", method, exc_info=True)
