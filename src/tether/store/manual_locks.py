"""Manual locks: a person (panel or ``tether shell lock``) reserves a shell; agents are refused.

Invariant: a manual lock is one row of ``manual_locks`` keyed by shell id, written in one
``IMMEDIATE`` transaction, so every tether process sharing the home sees it on its next write.
While the row exists, every agent write to that shell is refused at once (``check``) — whatever
``safety.lock`` says; it never waits. The people's own front doors (``PERSON_ACTORS``: the panel
and the CLI) are never refused by it: the lock is theirs. Only ``unlock`` (a person, in the panel or
the CLI) removes it; locks do not expire and survive restarts.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import RefusedError, UsageError
from tether.store.db import Store, register_schema

SHELL_ID_RE = re.compile(r"^dsh-[0-9a-z]{6}$")
MAX_WHO_CHARS = 128
MAX_WHY_CHARS = 1024
# The actors a person acts through; everything else (an MCP conversation) is an agent.
PERSON_ACTORS = frozenset({"panel", "cli"})

register_schema(
    "manual_locks",
    """
    CREATE TABLE IF NOT EXISTS manual_locks (
        shell_id TEXT PRIMARY KEY,
        who TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        why TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL
    )
    """,
)


def check_shell_id(shell_id: str) -> str:
    if not isinstance(shell_id, str) or SHELL_ID_RE.match(shell_id) is None:
        raise UsageError(
            f"{shell_id!r} is not a shell id; shell ids look like dsh-ab12cd (dsh- and 6 lowercase "
            "letters or digits); `tether shell list` shows them"
        )
    return shell_id


def utc_text(ms: int) -> str:
    """``2026-11-30 04:55:28 UTC``: how lock times are shown to people and models."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


@dataclass(frozen=True, slots=True, kw_only=True)
class ManualLock:
    shell_id: str
    who: str
    since_ms: int
    why: str
    source: str  # panel | cli

    def refusal(self) -> str:
        """The text an agent write is refused with (the front door prefixes ``REFUSED:``)."""
        why = self.why or "no reason given"
        return (
            f"shell {self.shell_id} is locked by {self.who} since {utc_text(self.since_ms)} ({why}); "
            f"ask the person to unlock it in the panel or with `tether shell unlock {self.shell_id}`"
        )


class ManualLocks:
    """The manual-lock table of one home."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    def lock(self, shell_id: str, *, who: str, why: str = "", source: str = "cli") -> tuple[ManualLock, bool]:
        """Lock ``shell_id``. Returns the lock in force and whether this call created it; locking a
        shell that is already locked keeps the first lock (its person, time and reason)."""
        check_shell_id(shell_id)
        who = who.strip()
        if not who:
            raise UsageError("a manual lock needs the name of the person taking it (who)")
        if len(who) > MAX_WHO_CHARS or len(why) > MAX_WHY_CHARS:
            raise UsageError(
                f"lock holder names are at most {MAX_WHO_CHARS} characters and reasons at most "
                f"{MAX_WHY_CHARS}; shorten them"
            )
        if source not in ("panel", "cli"):
            raise UsageError(f"manual lock source {source!r} is not allowed; use panel or cli")
        now = int(self._clock() * 1000)
        with self.store.transaction() as conn:
            inserted = conn.execute(
                "INSERT INTO manual_locks (shell_id, who, since_ms, why, source) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (shell_id) DO NOTHING",
                (shell_id, who, now, why.strip(), source),
            ).rowcount
            row = conn.execute("SELECT * FROM manual_locks WHERE shell_id = ?", (shell_id,)).fetchone()
        return _lock(row), inserted == 1

    def unlock(self, shell_id: str) -> ManualLock | None:
        """Remove the lock; returns it, or ``None`` when the shell was not locked."""
        check_shell_id(shell_id)
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT * FROM manual_locks WHERE shell_id = ?", (shell_id,)).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM manual_locks WHERE shell_id = ?", (shell_id,))
        return _lock(row)

    def get(self, shell_id: str) -> ManualLock | None:
        rows = self.store.query("SELECT * FROM manual_locks WHERE shell_id = ?", (shell_id,))
        return _lock(rows[0]) if rows else None

    def all(self) -> dict[str, ManualLock]:
        rows = self.store.query("SELECT * FROM manual_locks ORDER BY shell_id")
        return {r["shell_id"]: _lock(r) for r in rows}

    def check(self, shell_id: str, *, actor: str | None = None) -> None:
        """Raise ``RefusedError`` at once when a person locked ``shell_id`` and ``actor`` is an agent
        (``None`` counts as an agent); a person (``PERSON_ACTORS``) is never refused."""
        if actor in PERSON_ACTORS:
            return
        lock = self.get(shell_id)
        if lock is not None:
            raise RefusedError(lock.refusal())


def _lock(row: sqlite3.Row) -> ManualLock:
    return ManualLock(
        shell_id=row["shell_id"],
        who=row["who"],
        since_ms=row["since_ms"],
        why=row["why"],
        source=row["source"],
    )
