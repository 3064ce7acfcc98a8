"""The people who may use the panel, each with access of their own (``tether panel add NAME``).

Invariants:

- A person's access is one row of ``panel_people``: the name, and the SHA-256 of their token —
  never the token. The token (256 random bits) is shown once, when it is made; reading
  ``tether.db`` (mode 0600 like the rest of the home) gives hashes a person cannot sign in with.
- ``person_of_token`` compares the presented token's hash with every active row's by
  ``hmac.compare_digest``, without stopping at a match: the time taken says nothing of which
  row, or which bytes, matched. A token that is empty, longer than ``MAX_TOKEN_CHARS`` or not
  ASCII matches nobody, exactly like a wrong one.
- A name is 1–64 characters of ASCII letters, digits, ``.``, ``_``, ``-`` and ``@``, starting with
  a letter or digit, unique regardless of case, and none of ``RESERVED_NAMES`` (the words the log
  already uses for the shared token's person, the panel and the CLI): it is written into the audit
  log and shown on every page, so no control character or markup can reach either.
- Revoking keeps the row (its hash too) with ``revoked_ms``, so a revoked person's cookie is told
  apart from a forged one; adding the name again gives a new token and a new hash, so every older
  cookie of that name stops working. Each change closes ``$TETHER_HOME/panel/people`` after the
  commit: a server of the same home waiting on it (``close_watch``) hears of a revocation at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether.errors import NotFoundError, UsageError
from tether.store.db import Store, register_schema

PEOPLE_DIR: Final = "panel"
PEOPLE_FILE: Final = "people"
MAX_TOKEN_CHARS: Final = 256
TOKEN_PREFIX: Final = "tpp_"
NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
RESERVED_NAMES: Final = frozenset({"person", "panel", "cli", "host", "tool", "someone", "nobody"})

register_schema(
    "panel_people",
    """
    CREATE TABLE IF NOT EXISTS panel_people (
        name TEXT PRIMARY KEY COLLATE NOCASE,
        token_sha256 TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        revoked_ms INTEGER
    )
    """,
)


def check_person_name(name: str) -> str:
    """``name`` when it may name a person at the panel, else a ``UsageError`` saying what may."""
    if not isinstance(name, str) or NAME_RE.match(name) is None:
        # Not echoed: what is refused here is what must reach neither the log nor a page.
        raise UsageError(
            "that is not a person's name for the panel: use 1-64 ASCII letters, digits, '.', '_', "
            "'-' or '@', starting with a letter or digit (e.g. alice, bob.smith, carol@example.com)"
        )
    if name.lower() in RESERVED_NAMES:
        raise UsageError(
            f"{name!r} is a word tether's log already uses ({', '.join(sorted(RESERVED_NAMES))}); "
            "name the person by their own name"
        )
    return name


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelPerson:
    name: str
    token_sha256: str
    created_ms: int
    revoked_ms: int | None

    @property
    def active(self) -> bool:
        return self.revoked_ms is None


class PanelPeople:
    """The ``panel_people`` table of one home, and its wake-up file."""

    def __init__(self, store: Store, home: Path) -> None:
        self.store = store
        self.dir = home / PEOPLE_DIR

    def add(self, name: str) -> tuple[PanelPerson, str]:
        """Give ``name`` access: the new row and the token, which is never stored or shown again.
        A revoked name gets new access (its old cookies stay refused); an active one is refused."""
        check_person_name(name)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = int(time.time() * 1000)
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT * FROM panel_people WHERE name = ?", (name,)).fetchone()
            if row is not None and row["revoked_ms"] is None:
                raise UsageError(
                    f"{row['name']} already has panel access (since {_utc(row['created_ms'])}); to give "
                    f"them a new token, run `tether panel revoke {row['name']}` first"
                )
            conn.execute("DELETE FROM panel_people WHERE name = ?", (name,))
            conn.execute(
                "INSERT INTO panel_people (name, token_sha256, created_ms) VALUES (?, ?, ?)",
                (name, token_digest(token), now),
            )
        self.touch()
        person = self.get(name)
        assert person is not None
        return person, token

    def revoke(self, name: str) -> PanelPerson:
        """End ``name``'s access at once (every page of theirs, in every server of this home)."""
        check_person_name(name)
        now = int(time.time() * 1000)
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT * FROM panel_people WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFoundError(
                    f"nobody named {name!r} has panel access; `tether panel list` shows who has"
                )
            if row["revoked_ms"] is not None:
                raise NotFoundError(
                    f"{row['name']}'s panel access was already revoked at {_utc(row['revoked_ms'])}"
                )
            conn.execute("UPDATE panel_people SET revoked_ms = ? WHERE name = ?", (now, name))
        self.touch()
        person = self.get(name)
        assert person is not None
        return person

    def get(self, name: str) -> PanelPerson | None:
        rows = self.store.query("SELECT * FROM panel_people WHERE name = ?", (name,))
        return _person(rows[0]) if rows else None

    def all(self) -> list[PanelPerson]:
        return [_person(r) for r in self.store.query("SELECT * FROM panel_people ORDER BY name")]

    def person_of_token(self, presented: str) -> PanelPerson | None:
        """The active person whose token ``presented`` is, or None (see the module docstring)."""
        if not presented or len(presented) > MAX_TOKEN_CHARS or not presented.isascii():
            return None
        digest = token_digest(presented).encode()
        found = None
        for person in self.all():
            if hmac.compare_digest(digest, person.token_sha256.encode()) and person.active:
                found = person
        return found

    def touch(self) -> None:
        """Open and close ``panel/people`` for writing: ``IN_CLOSE_WRITE`` wakes the servers."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(self.dir / PEOPLE_FILE, flags, 0o600))


def _person(r: sqlite3.Row) -> PanelPerson:
    return PanelPerson(
        name=r["name"], token_sha256=r["token_sha256"], created_ms=r["created_ms"], revoked_ms=r["revoked_ms"]
    )


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
