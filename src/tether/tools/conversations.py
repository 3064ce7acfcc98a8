"""Which MCP client each conversation is: ``clientInfo`` carried from the front door to the store.

Invariant: the first call of a conversation whose context names its client (``CallContext.client``,
what the client said in ``initialize``) writes the pair to the store's ``conversations`` table, in
every process that serves it, so the panel, the CLI and ``shell_state`` of any process can show
"claude-code 2.1" next to ``conv-…``. A process remembers what it wrote and writes again only
when a conversation's client changes.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tether.errors import TetherError
from tether.store.conversations import Conversations
from tether.store.db import Store
from tether.tools.registry import CallContext, Handler, ToolDef, ToolResult

logger = logging.getLogger(__name__)

_REMEMBERED = 10_000


class ConversationNotes:
    """``ToolRegistry.middleware`` entry: note each conversation's client once (see the docstring)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._store: Store | None = None
        self._written: dict[str, str] = {}

    async def __call__(
        self, tool: ToolDef, arguments: Mapping[str, Any], ctx: CallContext, inner: Handler
    ) -> ToolResult:
        if ctx.client and ctx.source == "tool" and self._written.get(ctx.actor) != ctx.client:
            self._note(ctx.actor, ctx.client)
        return await inner(arguments, ctx)

    def _note(self, actor: str, client: str) -> None:
        try:
            if self._store is None:  # opened here too: a store that cannot open (a full disk) is no
                self._store = Store.open(self.home)  # reason to refuse a call that needs none
            Conversations(self._store).note(actor, client)
        except TetherError as exc:  # the store's own words name the file and the fix: no traceback
            logger.warning("could not note the client of %s: %s", actor, exc)
            return
        except (OSError, sqlite3.Error):  # a label for people: never worth failing the call for
            logger.warning("could not note the client of %s", actor, exc_info=True)
            return
        if len(self._written) >= _REMEMBERED:
            self._written.clear()
        self._written[actor] = client

    async def aclose(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def client_names(store: Store, actors: Iterable[str]) -> dict[str, str]:
    """Conversation id → the name its client gave, for ``actors`` (only those that named one)."""
    return Conversations(store).clients(actors)
