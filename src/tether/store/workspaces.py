"""Workspaces: a named set of shell descriptors to open again later (``workspace-*`` kinds).

Invariant: a workspace is one row of ``workspaces`` holding its whole descriptor list as JSON,
replaced atomically by ``save`` (one ``IMMEDIATE`` transaction), so a reader in any process sees
either the old set or the new one. Workspaces belong to the home, not to a conversation: every
conversation, the panel and the CLI see the same ones. Restoring returns the descriptors; opening
new shells from them is the engine's job (a restore never touches the saved shells).

Names are 1–64 characters, not blank, without control characters. A workspace holds 1–64 shells.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import NotFoundError, UsageError
from tether.store.db import Store, register_schema

MAX_NAME_CHARS = 64
MAX_SHELLS = 64
MAX_LABEL_CHARS = 32
COLS = (20, 1000)  # the terminal sizes a saved shell may reopen with
ROWS = (5, 500)

register_schema(
    "workspaces",
    """
    CREATE TABLE IF NOT EXISTS workspaces (
        name TEXT PRIMARY KEY,
        saved_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        shells TEXT NOT NULL
    )
    """,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellDescriptor:
    """What is needed to open a shell like a saved one (``idle_minutes=None``: global setting)."""

    label: str
    cwd: str
    cols: int
    rows: int
    idle_minutes: int | None = None
    host: str = "local"  # the configured host the shell ran on

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "cwd": self.cwd,
            "cols": self.cols,
            "rows": self.rows,
            "idleMinutes": self.idle_minutes,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShellDescriptor:
        return cls(
            label=str(data["label"]),
            cwd=str(data["cwd"]),
            cols=int(data["cols"]),
            rows=int(data["rows"]),
            idle_minutes=None if data.get("idleMinutes") is None else int(data["idleMinutes"]),
            host=str(data.get("host") or "local"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Workspace:
    name: str
    saved_ms: int
    actor: str
    shells: tuple[ShellDescriptor, ...]


def check_workspace_name(name: str) -> str:
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > MAX_NAME_CHARS
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise UsageError(
            f"workspace name {name!r} is not allowed; use 1-{MAX_NAME_CHARS} characters, not blank, "
            "without control characters"
        )
    return name


def _check_descriptor(i: int, d: ShellDescriptor) -> None:
    problems = []
    if len(d.label) > MAX_LABEL_CHARS:
        problems.append(f"label is longer than {MAX_LABEL_CHARS} characters")
    if not COLS[0] <= d.cols <= COLS[1]:
        problems.append(f"cols {d.cols} is outside {COLS[0]}-{COLS[1]}")
    if not ROWS[0] <= d.rows <= ROWS[1]:
        problems.append(f"rows {d.rows} is outside {ROWS[0]}-{ROWS[1]}")
    if d.idle_minutes is not None and not 0 <= d.idle_minutes <= 1440:
        problems.append(f"idleMinutes {d.idle_minutes} is outside 0-1440")
    if problems:
        raise UsageError(f"workspace shell {i}: {'; '.join(problems)}")


def fit_size(cols: int, rows: int) -> tuple[int, int]:
    """A live pane's size as a workspace can hold it: a person's small terminal attached (or a
    resize) may have shrunk the pane below what a shell reopens with."""
    return min(max(cols, COLS[0]), COLS[1]), min(max(rows, ROWS[0]), ROWS[1])


class WorkspaceStore:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    def save(self, name: str, shells: Sequence[ShellDescriptor], *, actor: str) -> tuple[Workspace, bool]:
        """Save (or replace) ``name``; returns it and whether an older one was replaced."""
        check_workspace_name(name)
        if not 1 <= len(shells) <= MAX_SHELLS:
            raise UsageError(
                f"a workspace holds 1 to {MAX_SHELLS} shells; got {len(shells)} (open shells first, then "
                "save the workspace from them)"
            )
        for i, d in enumerate(shells):
            _check_descriptor(i, d)
        now = int(self._clock() * 1000)
        body = json.dumps([d.to_json() for d in shells], separators=(",", ":"))
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            replaced = conn.execute("SELECT 1 FROM workspaces WHERE name = ?", (name,)).fetchone() is not None
            conn.execute(
                "INSERT INTO workspaces (name, saved_ms, actor, shells) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET saved_ms = excluded.saved_ms, actor = excluded.actor, "
                "shells = excluded.shells",
                (name, now, actor, body),
            )
        return Workspace(name=name, saved_ms=now, actor=actor, shells=tuple(shells)), replaced

    def list(self) -> list[Workspace]:
        """Every workspace, by name."""
        return [_workspace(r) for r in self.store.query("SELECT * FROM workspaces ORDER BY name")]

    def get(self, name: str) -> Workspace:
        rows = self.store.query("SELECT * FROM workspaces WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(self._missing(name))
        return _workspace(rows[0])

    def restore(self, name: str) -> tuple[ShellDescriptor, ...]:
        """The descriptors to open new shells from (the workspace itself is unchanged)."""
        return self.get(name).shells

    def delete(self, name: str) -> Workspace:
        """Delete ``name``; returns what was deleted."""
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT * FROM workspaces WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NotFoundError(self._missing(name))
            conn.execute("DELETE FROM workspaces WHERE name = ?", (name,))
        return _workspace(row)

    def _missing(self, name: str) -> str:
        names = [w.name for w in self.list()]
        have = f"saved workspaces: {', '.join(names)}" if names else "no workspace is saved yet"
        return f"no workspace named {name!r}; {have} (shell_manage workspace-list)"


def _workspace(row: sqlite3.Row) -> Workspace:
    shells = tuple(ShellDescriptor.from_json(d) for d in json.loads(row["shells"]))
    return Workspace(name=row["name"], saved_ms=row["saved_ms"], actor=row["actor"], shells=shells)
