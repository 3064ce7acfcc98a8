"""Durable records of persistent shells, their runs and each reader's position (SQLite store).

Invariant: tmux says which shells are alive; the store says who opened them and what ran in them.
A record outlives its shell (a shell that died with its record kept is "lost", the candidate for
``reap``); a live ``dsh-`` session without a record has owner ``unknown``. Every write is one
statement in its own ``IMMEDIATE`` transaction, so processes sharing a home never interleave.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from tether.errors import NotFoundError
from tether.store.db import Store, register_schema

register_schema(
    "sessions",
    """
    CREATE TABLE IF NOT EXISTS shells (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        created_ms INTEGER NOT NULL,
        cwd TEXT NOT NULL DEFAULT '',
        last_activity_ms INTEGER NOT NULL,
        idle_minutes INTEGER,
        closed_ms INTEGER,
        host TEXT NOT NULL DEFAULT 'local',
        nonce TEXT NOT NULL DEFAULT '',
        confinement TEXT NOT NULL DEFAULT ''
    );
    -- retention's candidates (closed long ago) without a scan of every shell
    CREATE INDEX IF NOT EXISTS shells_by_closed ON shells (closed_ms);
    CREATE TABLE IF NOT EXISTS shell_runs (
        run_id TEXT PRIMARY KEY,
        shell_id TEXT NOT NULL,
        nonce TEXT NOT NULL,
        command TEXT NOT NULL,
        actor TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        log_offset INTEGER NOT NULL,
        exit_code INTEGER,
        end_offset INTEGER,
        wrapped INTEGER NOT NULL DEFAULT 1,
        token INTEGER NOT NULL DEFAULT 0,
        typed_as_input TEXT,
        prompt_before INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS shell_runs_by_shell ON shell_runs (shell_id, started_ms);
    CREATE TABLE IF NOT EXISTS shell_reads (
        shell_id TEXT NOT NULL,
        actor TEXT NOT NULL,
        log_offset INTEGER NOT NULL,
        screen TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (shell_id, actor)
    );
    -- Enter pressed at the prompt by a person at a terminal of tether's (the panel's): who, and the
    -- shell's log size then (see ``people.note_enter`` and ``timeline``)
    CREATE TABLE IF NOT EXISTS shell_enters (
        shell_id TEXT NOT NULL,
        actor TEXT NOT NULL,
        log_offset INTEGER NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS shell_enters_by_shell ON shell_enters (shell_id, log_offset)
    """,
    added=(
        ("shells", "host", "TEXT NOT NULL DEFAULT 'local'"),
        ("shells", "nonce", "TEXT NOT NULL DEFAULT ''"),
        ("shells", "confinement", "TEXT NOT NULL DEFAULT ''"),
        ("shell_runs", "token", "INTEGER NOT NULL DEFAULT 0"),
        ("shell_runs", "typed_as_input", "TEXT"),
        ("shell_runs", "prompt_before", "INTEGER NOT NULL DEFAULT 0"),
    ),
)


def closed_meanwhile(shell_id: str) -> NotFoundError:
    """What a call on a shell that another call closed while it ran is told."""
    return NotFoundError(
        f"shell {shell_id} was closed meanwhile by another call (another conversation, the panel "
        f"or the idle sweep); nothing more was done. shell_open with action.from={shell_id} opens "
        "a new shell in its directory with its scrollback"
    )


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellRecord:
    id: str
    owner: str
    label: str
    created_ms: int
    cwd: str
    last_activity_ms: int
    idle_minutes: int | None
    host: str = "local"
    nonce: str = ""  # the shell's integration nonce ("" for a shell opened before integration)
    confinement: str = ""  # its sandbox (``hosts.confined.Confinement`` as JSON; "" = unconfined)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One ``shell_run``. ``token`` is what the shell's own events report for it;
    ``typed_as_input`` names the program the text went to when the shell was not at its prompt
    (such a run has no exit status)."""

    run_id: str
    shell_id: str
    token: int
    command: str
    actor: str
    started_ms: int
    log_offset: int
    exit_code: int | None
    end_offset: int | None
    typed_as_input: str | None = None
    prompt_before: int = 0  # the prompt shown when its keys were sent (a redraw repeats it)


def _shell(r: sqlite3.Row) -> ShellRecord:
    return ShellRecord(
        id=r["id"],
        owner=r["owner"],
        label=r["label"],
        created_ms=r["created_ms"],
        cwd=r["cwd"],
        last_activity_ms=r["last_activity_ms"],
        idle_minutes=r["idle_minutes"],
        host=r["host"],
        nonce=r["nonce"],
        confinement=r["confinement"],
    )


class Records:
    """Typed access to the session tables."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add_shell(self, rec: ShellRecord) -> None:
        self.store.execute(
            "INSERT INTO shells (id, owner, label, created_ms, cwd, last_activity_ms, idle_minutes, "
            "host, nonce, confinement) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rec.id,
                rec.owner,
                rec.label,
                rec.created_ms,
                rec.cwd,
                rec.last_activity_ms,
                rec.idle_minutes,
                rec.host,
                rec.nonce,
                rec.confinement,
            ),
        )

    def drop_shell(self, shell_id: str) -> None:
        """Forget a shell that was never started (``open_shell``'s record of a failed create)."""
        self.store.execute("DELETE FROM shells WHERE id = ?", (shell_id,))

    def shells(self) -> dict[str, ShellRecord]:
        rows = self.store.query("SELECT * FROM shells WHERE closed_ms IS NULL")
        return {r["id"]: _shell(r) for r in rows}

    def shell(self, shell_id: str) -> ShellRecord | None:
        rows = self.store.query("SELECT * FROM shells WHERE id = ? AND closed_ms IS NULL", (shell_id,))
        return _shell(rows[0]) if rows else None

    def set_nonce(self, shell_id: str, nonce: str) -> None:
        self.store.execute("UPDATE shells SET nonce = ? WHERE id = ?", (nonce, shell_id))

    def set_confinement(self, shell_id: str, confinement: str) -> None:
        self.store.execute("UPDATE shells SET confinement = ? WHERE id = ?", (confinement, shell_id))

    def any_shell(self, shell_id: str) -> ShellRecord | None:
        """The record of ``shell_id`` whether it is open or closed (what a revived shell came from)."""
        rows = self.store.query("SELECT * FROM shells WHERE id = ?", (shell_id,))
        return _shell(rows[0]) if rows else None

    def host_of(self, shell_id: str) -> str | None:
        """The host a shell ran on, also after it was closed (``None``: no record)."""
        rows = self.store.query("SELECT host FROM shells WHERE id = ?", (shell_id,))
        return str(rows[0]["host"]) if rows else None

    def mark_closed(self, shell_id: str, at_ms: int) -> bool:
        """Close the record; ``False``: it was closed already (by this call's rival, in any process)."""
        return (
            self.store.execute(
                "UPDATE shells SET closed_ms = ? WHERE id = ? AND closed_ms IS NULL", (at_ms, shell_id)
            )
            == 1
        )

    def closed(self, shell_id: str) -> bool:
        """Whether the shell has a record, and it is closed."""
        return bool(
            self.store.query("SELECT 1 FROM shells WHERE id = ? AND closed_ms IS NOT NULL", (shell_id,))
        )

    def reopen(self, shell_id: str, closed_ms: int) -> None:
        """Undo ``mark_closed`` of a close that failed before the shell was ended."""
        self.store.execute(
            "UPDATE shells SET closed_ms = NULL WHERE id = ? AND closed_ms = ?", (shell_id, closed_ms)
        )

    def touch(self, shell_id: str) -> None:
        self.store.execute("UPDATE shells SET last_activity_ms = ? WHERE id = ?", (now_ms(), shell_id))

    def save_run(
        self,
        run: RunRecord,
        *,
        exit_code: int | None,
        end_offset: int | None,
        reader: str | None = None,
        read_offset: int = 0,
    ) -> None:
        """Record a run (and what is known of its end) plus, optionally, a reader's new position —
        one transaction, so a run costs one commit."""
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO shell_runs (run_id, shell_id, nonce, token, command, actor, started_ms, "
                "log_offset, wrapped, typed_as_input, prompt_before, exit_code, end_offset) "
                "VALUES (?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET exit_code = COALESCE(shell_runs.exit_code, "
                "excluded.exit_code), end_offset = COALESCE(shell_runs.end_offset, excluded.end_offset)",
                (
                    run.run_id,
                    run.shell_id,
                    run.token,
                    run.command,
                    run.actor,
                    run.started_ms,
                    run.log_offset,
                    int(run.typed_as_input is None),
                    run.typed_as_input,
                    run.prompt_before,
                    exit_code,
                    end_offset,
                ),
            )
            conn.execute(
                "UPDATE shells SET last_activity_ms = ? WHERE id = ?", (run.started_ms, run.shell_id)
            )
            if reader is not None:
                conn.execute(
                    "INSERT INTO shell_reads (shell_id, actor, log_offset) VALUES (?, ?, ?) "
                    "ON CONFLICT (shell_id, actor) DO UPDATE SET log_offset = excluded.log_offset",
                    (run.shell_id, reader, read_offset),
                )

    def finish_run(self, run_id: str, exit_code: int, end_offset: int) -> None:
        self.store.execute(
            "UPDATE shell_runs SET exit_code = ?, end_offset = ? WHERE run_id = ? AND exit_code IS NULL",
            (exit_code, end_offset, run_id),
        )

    def run(self, run_id: str) -> RunRecord | None:
        rows = self.store.query("SELECT * FROM shell_runs WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def note_enter(self, shell_id: str, actor: str, log_offset: int) -> None:
        self.store.execute(
            "INSERT INTO shell_enters (shell_id, actor, log_offset, at_ms) VALUES (?, ?, ?, ?)",
            (shell_id, actor, log_offset, now_ms()),
        )

    def enters(self, shell_id: str) -> list[tuple[int, str]]:
        """``(log offset, actor)`` of every Enter noted on the shell, in the log's order."""
        rows = self.store.query(
            "SELECT log_offset, actor FROM shell_enters WHERE shell_id = ? ORDER BY log_offset, rowid",
            (shell_id,),
        )
        return [(int(r["log_offset"]), str(r["actor"])) for r in rows]

    def run_by_token(self, shell_id: str, token: int) -> RunRecord | None:
        rows = self.store.query(
            "SELECT * FROM shell_runs WHERE shell_id = ? AND token = ? ORDER BY rowid DESC LIMIT 1",
            (shell_id, token),
        )
        return _run(rows[0]) if rows else None

    def last_run(self, shell_id: str) -> RunRecord | None:
        rows = self.store.query(
            "SELECT * FROM shell_runs WHERE shell_id = ? ORDER BY started_ms DESC, rowid DESC LIMIT 1",
            (shell_id,),
        )
        return _run(rows[0]) if rows else None

    def read_position(self, shell_id: str, actor: str) -> tuple[int, str] | None:
        rows = self.store.query(
            "SELECT log_offset, screen FROM shell_reads WHERE shell_id = ? AND actor = ?", (shell_id, actor)
        )
        return (rows[0]["log_offset"], rows[0]["screen"]) if rows else None

    def set_read_position(self, shell_id: str, actor: str, offset: int, screen: str | None = None) -> None:
        if screen is None:
            self.store.execute(
                "INSERT INTO shell_reads (shell_id, actor, log_offset) VALUES (?, ?, ?) "
                "ON CONFLICT (shell_id, actor) DO UPDATE SET log_offset = excluded.log_offset",
                (shell_id, actor, offset),
            )
        else:
            self.store.execute(
                "INSERT INTO shell_reads (shell_id, actor, log_offset, screen) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (shell_id, actor) DO UPDATE SET log_offset = excluded.log_offset, "
                "screen = excluded.screen",
                (shell_id, actor, offset, screen),
            )


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        shell_id=row["shell_id"],
        token=row["token"],
        command=row["command"],
        actor=row["actor"],
        started_ms=row["started_ms"],
        log_offset=row["log_offset"],
        exit_code=row["exit_code"],
        end_offset=row["end_offset"],
        typed_as_input=row["typed_as_input"] or (None if row["wrapped"] else "a program in front"),
        prompt_before=row["prompt_before"],
    )
