"""The clients behind conversations: which MCP client (its own ``clientInfo``) an actor id was.

Invariant: one row per conversation id, written the first time a tether process serves a call of
that conversation with a known client (``note``), updated when the same conversation reconnects
with another client (a restarted client that keeps its ``TETHER_CONVERSATION``). The name is the
client's own claim in ``initialize`` — a label for people reading timelines and lists, never an
identity anything is decided on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tether.store.db import Store, register_schema

MAX_CLIENT_CHARS = 200
_IN_BATCH = 500  # ids asked in one query (under SQLite's limit of bound parameters)

register_schema(
    "conversations",
    """
    CREATE TABLE IF NOT EXISTS conversations (
        actor TEXT PRIMARY KEY,
        client TEXT NOT NULL,
        seen_ms INTEGER NOT NULL
    )
    """,
)


class Conversations:
    """The ``conversations`` table of one home."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def note(self, actor: str, client: str) -> None:
        client = "".join(c for c in client if c.isprintable()).strip()[:MAX_CLIENT_CHARS]
        if not actor or not client:
            return
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO conversations (actor, client, seen_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (actor) DO UPDATE SET client = excluded.client, seen_ms = excluded.seen_ms",
                (actor, client, int(time.time() * 1000)),
            )

    def client_of(self, actor: str) -> str | None:
        rows = self.store.query("SELECT client FROM conversations WHERE actor = ?", (actor,))
        return str(rows[0]["client"]) if rows else None

    def clients(self, actors: Iterable[str]) -> dict[str, str]:
        """Conversation id → its client's name, for ``actors`` (those that named one). Asked by
        id: the table keeps every conversation the home ever had (a row per ``tether mcp``
        started), and a listing of a few shells must not read them all."""
        wanted = sorted(set(actors))
        found: dict[str, str] = {}
        for i in range(0, len(wanted), _IN_BATCH):
            batch = wanted[i : i + _IN_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.store.query(
                f"SELECT actor, client FROM conversations WHERE actor IN ({marks})", tuple(batch)
            )
            found.update({r["actor"]: r["client"] for r in rows})
        return found
