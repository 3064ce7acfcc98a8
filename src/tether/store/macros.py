"""Macros: named command snippets in three scopes, with a full, restorable history.

Invariant: the ``macros`` table (what is defined now) and the ``macro_events`` table (everything
that ever happened) change together in one ``IMMEDIATE`` transaction, and every event's ``at_ms``
is unique in the whole home and strictly increasing in commit order — so ``at`` names exactly one
version forever, ``restore(name, at)`` can reach any of them, and processes sharing a home never
interleave half-written changes. Nothing is ever deleted from the history.

Scopes and keys (``owner``)::

    global          owner ''                  visible to everyone
    conversation    owner = conversation id   visible to that conversation (the default scope)
    shell           owner = shell id          visible to whoever works in that shell

A ``MacroView`` (conversation, shell) sees all three; when one name exists in several, the most
specific wins: shell > conversation > global. ``remove``, ``history`` and ``restore`` resolve a
name the same way unless a scope is given.

Names are 1–64 characters of ``[A-Za-z0-9_.-]`` (``NAME_RULE``): no spaces and no ``/``, because a
macro is invoked as ``/NAME args``. Texts are at most ``MAX_TEXT_CHARS`` characters.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from tether.errors import NotFoundError, UsageError
from tether.store.db import Store, register_schema

MacroScope = Literal["global", "conversation", "shell"]
MacroOp = Literal["set", "remove", "restore"]
SCOPES: tuple[MacroScope, ...] = get_args(MacroScope)
# Most specific first: the order a view resolves a name in.
PRECEDENCE: tuple[MacroScope, ...] = ("shell", "conversation", "global")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NAME_RULE = "1-64 characters from A-Z a-z 0-9 _ . - (no spaces, no '/')"
MAX_TEXT_CHARS = 64 * 1024
MAX_NOTE_CHARS = 4 * 1024
DAY_MS = 86_400_000
MAX_DAYS = 3650

register_schema(
    "macros",
    """
    CREATE TABLE IF NOT EXISTS macros (
        scope TEXT NOT NULL,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        text TEXT NOT NULL,
        submit INTEGER NOT NULL,
        note TEXT,
        updated_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        PRIMARY KEY (scope, owner, name)
    );
    CREATE TABLE IF NOT EXISTS macro_events (
        at_ms INTEGER PRIMARY KEY,
        scope TEXT NOT NULL,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        op TEXT NOT NULL,
        text TEXT,
        submit INTEGER,
        note TEXT,
        actor TEXT NOT NULL,
        restored_from INTEGER
    );
    CREATE INDEX IF NOT EXISTS macro_events_by_name ON macro_events (name, at_ms)
    """,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroView:
    """Who is looking: the conversation, and the shell the command goes to (if any)."""

    conversation: str
    shell: str | None = None

    def owner_of(self, scope: MacroScope) -> str | None:
        """The key a macro of ``scope`` is filed under for this view (``None``: no such scope here)."""
        if scope == "global":
            return ""
        if scope == "conversation":
            return self.conversation
        return self.shell


@dataclass(frozen=True, slots=True, kw_only=True)
class Macro:
    """One defined macro. ``updated_ms`` is the ``at_ms`` of the event that made this version."""

    name: str
    text: str
    scope: MacroScope
    owner: str
    submit: bool
    note: str | None
    updated_ms: int
    actor: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroEvent:
    """One history entry. ``text``/``submit`` are ``None`` for a removal; a restore names the
    version it brought back in ``restored_from``."""

    at_ms: int
    name: str
    scope: MacroScope
    owner: str
    op: MacroOp
    text: str | None
    submit: bool | None
    note: str | None
    actor: str
    restored_from: int | None


def check_macro_name(name: str) -> str:
    if not isinstance(name, str) or NAME_RE.match(name) is None:
        raise UsageError(f"macro name {name!r} is not allowed; a macro name is {NAME_RULE}")
    return name


class MacroStore:
    """Typed access to the macro tables of one home."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    # ---- reading --------------------------------------------------------------------------

    def visible(self, view: MacroView, *, shadowed: bool = False) -> list[Macro]:
        """The macros ``view`` sees, by name; one per name (the most specific) unless ``shadowed``,
        which also lists the ones a more specific scope hides (most specific first per name)."""
        rank = {scope: i for i, scope in enumerate(PRECEDENCE)}
        found = sorted(self._all_of(view), key=lambda m: (m.name, rank[m.scope]))
        if shadowed:
            return found
        first: dict[str, Macro] = {}
        for macro in found:
            first.setdefault(macro.name, macro)
        return list(first.values())

    def table(self, view: MacroView) -> dict[str, Macro]:
        """``visible(view)`` as a name → macro mapping (what expansion needs)."""
        return {m.name: m for m in self.visible(view)}

    def get(self, name: str, view: MacroView, *, scope: MacroScope | None = None) -> Macro | None:
        """The macro ``name`` resolves to for ``view`` (in ``scope`` only, when given)."""
        for candidate in self.visible(view, shadowed=True):
            if candidate.name == name and (scope is None or candidate.scope == scope):
                return candidate
        return None

    def history(
        self, name: str, view: MacroView, *, days: int = 7, scope: MacroScope | None = None
    ) -> list[MacroEvent]:
        """Every set/remove/restore of ``name`` in the scopes ``view`` sees within the last
        ``days`` days, oldest first."""
        check_macro_name(name)
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise UsageError(f"macro history days must be a whole number from 1 to {MAX_DAYS}; got {days!r}")
        since = self._now_ms() - days * DAY_MS
        return [e for e in self._events(name, view, scope) if e.at_ms >= since]

    # ---- writing --------------------------------------------------------------------------

    def set(
        self,
        name: str,
        text: str,
        *,
        view: MacroView,
        actor: str,
        scope: MacroScope = "conversation",
        submit: bool = True,
        note: str | None = None,
    ) -> Macro:
        """Define or replace ``name`` in ``scope`` (keyed by the view's conversation or shell)."""
        check_macro_name(name)
        owner = self._owner(view, scope)
        if not text.strip():
            raise UsageError("macro text must not be empty or blank; give the command the macro stands for")
        if len(text) > MAX_TEXT_CHARS:
            raise UsageError(
                f"macro text is {len(text)} characters; at most {MAX_TEXT_CHARS} are allowed (put long "
                "scripts in a file and make the macro run it)"
            )
        if note is not None and len(note) > MAX_NOTE_CHARS:
            raise UsageError(f"macro note is {len(note)} characters; at most {MAX_NOTE_CHARS} are allowed")
        macro = Macro(
            name=name,
            text=text,
            scope=scope,
            owner=owner,
            submit=submit,
            note=note,
            updated_ms=0,
            actor=actor,
        )
        with self.store.transaction() as conn:
            return self._write(conn, macro, op="set", restored_from=None)

    def remove(self, name: str, *, view: MacroView, actor: str, scope: MacroScope | None = None) -> Macro:
        """Delete the macro ``name`` resolves to (or the one in ``scope``); returns what was removed."""
        check_macro_name(name)
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            current = self.get(name, view, scope=scope)
            if current is None:
                raise NotFoundError(self._missing(name, view, scope))
            at = self._next_at(conn)
            conn.execute(
                "DELETE FROM macros WHERE scope = ? AND owner = ? AND name = ?",
                (current.scope, current.owner, name),
            )
            conn.execute(
                "INSERT INTO macro_events (at_ms, scope, owner, name, op, actor) VALUES (?, ?, ?, ?, ?, ?)",
                (at, current.scope, current.owner, name, "remove", actor),
            )
        return current

    def restore(self, name: str, at: int, *, view: MacroView, actor: str) -> Macro:
        """Make the version recorded at ``at`` (a set or restore event of ``name`` this view can
        see) the current one in its scope; the restore is itself a new history entry."""
        check_macro_name(name)
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            events = [e for e in self._events(name, view, None) if e.at_ms == at]
            if not events:
                raise NotFoundError(
                    f"macro {name!r} has no history entry at {at}; list the versions with "
                    "shell_manage macro-history and pass one of their timestamps as at"
                )
            event = events[0]
            if event.text is None:
                raise UsageError(
                    f"the entry of macro {name!r} at {at} is a removal, not a version; pick a set or restore "
                    "entry from macro-history (or remove the macro with macro-rm)"
                )
            macro = Macro(
                name=name,
                text=event.text,
                scope=event.scope,
                owner=event.owner,
                submit=bool(event.submit),
                note=event.note,
                updated_ms=0,
                actor=actor,
            )
            return self._write(conn, macro, op="restore", restored_from=at)

    # ---- internals ------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _next_at(self, conn: sqlite3.Connection) -> int:
        # Inside the IMMEDIATE transaction: no other writer can take the same value.
        row = conn.execute("SELECT MAX(at_ms) FROM macro_events").fetchone()
        last = row[0] if row is not None and row[0] is not None else 0
        return max(self._now_ms(), last + 1)

    def _write(
        self, conn: sqlite3.Connection, macro: Macro, *, op: MacroOp, restored_from: int | None
    ) -> Macro:
        at = self._next_at(conn)
        conn.execute(
            "INSERT INTO macros (scope, owner, name, text, submit, note, updated_ms, actor) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, owner, name) DO UPDATE SET "
            "text = excluded.text, submit = excluded.submit, note = excluded.note, "
            "updated_ms = excluded.updated_ms, actor = excluded.actor",
            (
                macro.scope,
                macro.owner,
                macro.name,
                macro.text,
                int(macro.submit),
                macro.note,
                at,
                macro.actor,
            ),
        )
        conn.execute(
            "INSERT INTO macro_events (at_ms, scope, owner, name, op, text, submit, note, actor, "
            "restored_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                at,
                macro.scope,
                macro.owner,
                macro.name,
                op,
                macro.text,
                int(macro.submit),
                macro.note,
                macro.actor,
                restored_from,
            ),
        )
        return Macro(
            name=macro.name,
            text=macro.text,
            scope=macro.scope,
            owner=macro.owner,
            submit=macro.submit,
            note=macro.note,
            updated_ms=at,
            actor=macro.actor,
        )

    @staticmethod
    def _owner(view: MacroView, scope: MacroScope) -> str:
        if scope not in SCOPES:
            raise UsageError(f"macro scope {scope!r} is not allowed; use one of {', '.join(SCOPES)}")
        owner = view.owner_of(scope)
        if owner is None:
            raise UsageError(
                "macro scope 'shell' needs a shell: name one in target.sessions (a dsh- id), or use "
                "scope 'conversation' or 'global'"
            )
        if scope == "conversation" and not owner.strip():
            raise UsageError("macro scope 'conversation' needs a conversation id; use scope 'global'")
        return owner

    @staticmethod
    def _keys(view: MacroView, scope: MacroScope | None) -> list[tuple[str, str]]:
        keys: list[tuple[str, str]] = []
        for s in PRECEDENCE if scope is None else (scope,):
            owner = view.owner_of(s)
            if owner is not None:
                keys.append((s, owner))
        return keys

    def _all_of(self, view: MacroView) -> list[Macro]:
        found: list[Macro] = []
        for scope, owner in self._keys(view, None):
            rows = self.store.query("SELECT * FROM macros WHERE scope = ? AND owner = ?", (scope, owner))
            found.extend(_macro(r) for r in rows)
        return found

    def _events(self, name: str, view: MacroView, scope: MacroScope | None) -> list[MacroEvent]:
        keys = self._keys(view, scope)
        rows = self.store.query("SELECT * FROM macro_events WHERE name = ? ORDER BY at_ms", (name,))
        return [_event(r) for r in rows if (r["scope"], r["owner"]) in keys]

    @staticmethod
    def _missing(name: str, view: MacroView, scope: MacroScope | None) -> str:
        where = f"in scope {scope}" if scope is not None else "in any scope visible here"
        return f"no macro named {name!r} {where}; list the defined macros with shell_manage macro-list"


def _macro(row: sqlite3.Row) -> Macro:
    return Macro(
        name=row["name"],
        text=row["text"],
        scope=row["scope"],
        owner=row["owner"],
        submit=bool(row["submit"]),
        note=row["note"],
        updated_ms=row["updated_ms"],
        actor=row["actor"],
    )


def _event(row: sqlite3.Row) -> MacroEvent:
    return MacroEvent(
        at_ms=row["at_ms"],
        name=row["name"],
        scope=row["scope"],
        owner=row["owner"],
        op=row["op"],
        text=row["text"],
        submit=None if row["submit"] is None else bool(row["submit"]),
        note=row["note"],
        actor=row["actor"],
        restored_from=row["restored_from"],
    )
