"""The queue of questions put to a person (``approvals``): shared by every tether process of a home.

Invariant: a question is one row, and it is answered at most once. ``decide`` (a check and an
``UPDATE`` in one ``IMMEDIATE`` transaction) and ``close`` (one ``UPDATE … WHERE status =
'pending'``) exclude each other, so of two people answering at once, or a person approving in the
panel (``tether serve``) and the asking call timing out (in a ``tether mcp``), exactly one wins,
and both sides read the same outcome back. A decision after ``expires_ms`` is refused, and so is
one from the panel for a question put to the person at an MCP client (``channel``). Only the
winning decision reaches its audit record (``decide``'s ``before``).

Waking without polling: every change is followed by a close of a file under
``$TETHER_HOME/approvals/`` — ``<id>`` when that question was answered (or expired, or cancelled),
``queue`` when the set of pending questions changed — so a waiter registered with
``close_watch`` for that name wakes at once, whichever process made the change.

Rows are kept (they are the panel's history of decisions) up to ``KEEP_ROWS``; the audit log is
the durable record of every decision.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.store.db import Store, register_schema

Status = Literal["pending", "approved", "denied", "expired", "cancelled"]
Channel = Literal["panel", "elicitation"]
APPROVALS_DIR = "approvals"
QUEUE_FILE = "queue"
KEEP_ROWS = 500

register_schema(
    "approvals",
    """
    CREATE TABLE IF NOT EXISTS approvals (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        tool TEXT NOT NULL,
        subject TEXT NOT NULL,
        mode TEXT NOT NULL,
        justification TEXT NOT NULL,
        asker TEXT NOT NULL,
        targets TEXT NOT NULL,
        channel TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        decided_by TEXT NOT NULL DEFAULT '',
        decided_ms INTEGER,
        reason TEXT NOT NULL DEFAULT '',
        asker_process TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals (status, created_ms)
    """,
    added=(("approvals", "asker_process", "TEXT NOT NULL DEFAULT ''"),),
)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRow:
    """One question and, once answered, its answer (``decided_by``: who, ``reason``: their words)."""

    id: str
    kind: str  # sandbox_escalation | bypass-guard
    tool: str
    subject: str  # the command, or the shell being opened
    mode: str  # the sandbox mode asked for, or the guard rule that blocked
    justification: str
    asker: str  # the conversation that asked
    targets: tuple[str, ...]
    channel: Channel
    created_ms: int
    expires_ms: int
    status: Status
    decided_by: str
    decided_ms: int | None
    reason: str
    asker_process: str = ""  # the process waiting for the answer (``this_process``); "" = unknown

    def asker_gone(self) -> bool:
        """The process that asked has ended (a crash, a SIGKILL): nothing waits for an answer."""
        return bool(self.asker_process) and not _alive(self.asker_process)


def this_process() -> str:
    """This process as ``pid:start@namespace``: its start time (clock ticks since boot) tells it
    from a later process given the same pid, and its PID namespace says where that pid means it
    (a tether in a container sharing the home with one outside sees other pids)."""
    identity = _identity(os.getpid())
    return f"{identity}@{_pid_namespace()}" if identity else ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _identity(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None
    return f"{pid}:{fields[19].decode()}"


def _alive(identity: str) -> bool:
    """Whether the process ``identity`` names still runs; True when this process cannot tell (it
    was in another PID namespace)."""
    process, _, namespace = identity.partition("@")
    if namespace != _pid_namespace():
        return True
    pid, _, _start = process.partition(":")
    return pid.isdigit() and _identity(int(pid)) == process


class ApprovalQueue:
    """Typed access to the ``approvals`` table and its wake-up files."""

    def __init__(self, store: Store, home: Path) -> None:
        self.store = store
        self.dir = home / APPROVALS_DIR

    def ask(
        self,
        *,
        kind: str,
        tool: str,
        subject: str,
        mode: str,
        justification: str,
        asker: str,
        targets: tuple[str, ...],
        channel: Channel,
        timeout_ms: int,
    ) -> ApprovalRow:
        created = now_ms()
        row_id = "apr-" + secrets.token_hex(6)
        self.store.execute(
            "INSERT INTO approvals (id, kind, tool, subject, mode, justification, asker, targets, channel, "
            "created_ms, expires_ms, status, asker_process) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
            (
                row_id,
                kind,
                tool,
                subject,
                mode,
                justification,
                asker,
                json.dumps(list(targets)),
                channel,
                created,
                created + timeout_ms,
                this_process(),
            ),
        )
        self._trim()
        self.touch(QUEUE_FILE)
        found = self.get(row_id)
        assert found is not None
        return found

    def get(self, row_id: str) -> ApprovalRow | None:
        rows = self.store.query("SELECT * FROM approvals WHERE id = ?", (row_id,))
        return _row(rows[0]) if rows else None

    def pending(self, *, channel: Channel = "panel") -> list[ApprovalRow]:
        """Questions waiting for a person in ``channel``, oldest first (expired ones excluded)."""
        rows = self.store.query(
            "SELECT * FROM approvals WHERE status = 'pending' AND channel = ? AND expires_ms > ? "
            "ORDER BY created_ms",
            (channel, now_ms()),
        )
        return [_row(r) for r in rows]

    def unanswered(self) -> list[ApprovalRow]:
        """Every question still ``pending``, of either channel, past its deadline or not."""
        return [_row(r) for r in self.store.query("SELECT * FROM approvals WHERE status = 'pending'")]

    def decided_since(
        self, since_ms: int, *, channel: Channel = "panel", limit: int = 20
    ) -> list[ApprovalRow]:
        """Questions of ``channel`` answered, expired or withdrawn at ``since_ms`` or later, newest
        first (at most ``limit``)."""
        rows = self.store.query(
            "SELECT * FROM approvals WHERE status != 'pending' AND channel = ? AND decided_ms >= ? "
            "ORDER BY decided_ms DESC LIMIT ?",
            (channel, since_ms, limit),
        )
        return [_row(r) for r in rows]

    def decide(
        self,
        row_id: str,
        *,
        approve: bool,
        by: str,
        reason: str = "",
        channel: Channel | None = None,
        before: Callable[[ApprovalRow], None] | None = None,
        deadline: bool = True,
    ) -> bool:
        """Answer a pending, unexpired question (of ``channel``, when given); False when it was
        answered, expired, is unknown or is asked elsewhere. ``deadline=False``: the answer came
        through a channel that kept its own deadline (an elicitation's form), so ``expires_ms``
        does not apply.

        ``before`` (the answer's audit record) runs with the pending row under the database's
        write lock, before the answer is written: only the answer that will count is recorded —
        of two people answering at once, or an answer and the deadline, the loser reaches
        ``before`` only after the winner committed, finds the row no longer pending and records
        nothing — and an exception from it leaves the question pending."""
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            rows = conn.execute("SELECT * FROM approvals WHERE id = ?", (row_id,)).fetchall()
            at = now_ms()
            found = _row(rows[0]) if rows else None
            if (
                found is None
                or found.status != "pending"
                or (deadline and found.expires_ms <= at)
                or (channel is not None and found.channel != channel)
            ):
                return False
            if before is not None:
                before(found)
            conn.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_ms = ?, reason = ? WHERE id = ?",
                ("approved" if approve else "denied", by, at, reason, row_id),
            )
        # After the commit: a waiter woken earlier would read the row still pending and sleep on.
        self._changed(row_id)
        return True

    def close(self, row_id: str, status: Literal["expired", "cancelled"], *, by: str = "") -> bool:
        """Nobody answered in time, or the asker stopped waiting; False when it was answered first."""
        changed = self.store.execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_ms = ? "
            "WHERE id = ? AND status = 'pending'",
            (status, by, now_ms(), row_id),
        )
        if changed:
            self._changed(row_id)
        return bool(changed)

    def forget_wake(self, row_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / row_id).unlink()

    def _changed(self, row_id: str) -> None:
        self.touch(row_id)
        self.touch(QUEUE_FILE)

    def touch(self, name: str) -> None:
        """Open and close ``approvals/<name>`` for writing: ``IN_CLOSE_WRITE`` wakes its waiters."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)

    def _trim(self) -> None:
        self.store.execute(
            "DELETE FROM approvals WHERE status != 'pending' AND id NOT IN "
            "(SELECT id FROM approvals ORDER BY created_ms DESC LIMIT ?)",
            (KEEP_ROWS,),
        )


def _row(r: sqlite3.Row) -> ApprovalRow:
    channel: Channel = "elicitation" if r["channel"] == "elicitation" else "panel"
    status = _status(r["status"])
    return ApprovalRow(
        id=r["id"],
        kind=r["kind"],
        tool=r["tool"],
        subject=r["subject"],
        mode=r["mode"],
        justification=r["justification"],
        asker=r["asker"],
        targets=tuple(json.loads(r["targets"])),
        channel=channel,
        created_ms=r["created_ms"],
        expires_ms=r["expires_ms"],
        status=status,
        decided_by=r["decided_by"],
        decided_ms=r["decided_ms"],
        reason=r["reason"],
        asker_process=r["asker_process"],
    )


def _status(value: str) -> Status:
    for status in ("pending", "approved", "denied", "expired", "cancelled"):
        if value == status:
            return status
    return "cancelled"
