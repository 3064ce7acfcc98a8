"""Snapshots of shells: what a shell looked like (label, cwd, size, scrollback) at one moment.

Invariant: a snapshot is a row of ``snapshots`` plus one text file
``$TETHER_HOME/snapshots/<shell>/<taken_ms>.txt``; the file is complete (written to a temporary
name, fsynced, renamed) before its row is committed, so every row's file exists and is whole.
``taken_ms`` is unique per shell (a second snapshot in the same millisecond gets the next one).

Bounds, so snapshots never grow without limit (each documented in docs/shells.md, Records):

- the text keeps at most ``max_bytes`` (default 1 MiB) UTF-8 bytes — the *newest* ones, starting
  at a line boundary; ``dropped_bytes`` says how much older text was cut;
- at most ``keep_per_shell`` (default 20) snapshots per shell — taking one more deletes the oldest;
- at most ``max_total_bytes`` (default 256 MiB) of snapshots on disk in the home, each counted as
  the whole blocks its file takes (``BLOCK``, 4 KiB: a snapshot of a few lines takes one) — the
  oldest snapshots of any shell go first (the one just taken is always kept), and the directory of
  a shell left with none goes with them. Counting the text alone let small snapshots take about
  twenty times the cap (a 200-byte close snapshot is a 4 KiB block and a directory).

Secrets: the caller passes the vault's masker as ``redact``; it runs over the label, cwd and text
before anything is written, so a secret a program printed never reaches the disk in clear.

A crash between writing a file and committing its row leaves an orphan file; the next snapshot of
that shell deletes files no row names.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from tether.errors import StorageError, UsageError
from tether.home import open_regular, replace_file
from tether.store.db import Store, register_schema
from tether.store.manual_locks import check_shell_id

SnapshotReason = Literal["manual", "close", "idle", "resize", "rename"]
REASONS: tuple[SnapshotReason, ...] = get_args(SnapshotReason)
SNAPSHOTS_DIR = "snapshots"
MAX_BYTES = 1024 * 1024
KEEP_PER_SHELL = 20
MAX_TOTAL_BYTES = 256 * 1024 * 1024
BLOCK = 4096  # what a small file takes on the usual file systems (ext4, xfs, btrfs)
# A snapshot's ``size`` in whole blocks, as SQL (integer division) and as Python.
_ON_DISK_SQL = f"((MAX(size, 1) + {BLOCK - 1}) / {BLOCK}) * {BLOCK}"


def on_disk(size: int) -> int:
    return -(-max(size, 1) // BLOCK) * BLOCK


register_schema(
    "snapshots",
    """
    CREATE TABLE IF NOT EXISTS snapshots (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        shell_id TEXT NOT NULL,
        label TEXT NOT NULL,
        cwd TEXT NOT NULL,
        cols INTEGER NOT NULL,
        rows INTEGER NOT NULL,
        taken_ms INTEGER NOT NULL,
        reason TEXT NOT NULL,
        actor TEXT NOT NULL,
        file TEXT NOT NULL,
        size INTEGER NOT NULL,
        dropped_bytes INTEGER NOT NULL,
        UNIQUE (shell_id, taken_ms)
    );
    CREATE INDEX IF NOT EXISTS snapshots_by_time ON snapshots (taken_ms)
    """,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """One snapshot; ``path`` is its text file, ``size`` its bytes, ``dropped_bytes`` what the cap cut."""

    id: int
    shell_id: str
    label: str
    cwd: str
    cols: int
    rows: int
    taken_ms: int
    reason: SnapshotReason
    actor: str
    path: Path
    size: int
    dropped_bytes: int


class SnapshotStore:
    def __init__(
        self,
        store: Store,
        home: Path,
        *,
        redact: Callable[[str], str] | None = None,
        max_bytes: int = MAX_BYTES,
        keep_per_shell: int = KEEP_PER_SHELL,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.dir = home / SNAPSHOTS_DIR
        self._redact = redact
        self.max_bytes = max_bytes
        self.keep_per_shell = keep_per_shell
        self.max_total_bytes = max_total_bytes
        self._clock = clock

    def take(
        self,
        *,
        shell_id: str,
        label: str,
        cwd: str,
        cols: int,
        rows: int,
        reason: SnapshotReason,
        text: str,
        actor: str = "",
    ) -> Snapshot:
        """Save a snapshot and apply the caps; returns it."""
        check_shell_id(shell_id)
        if reason not in REASONS:
            raise UsageError(f"snapshot reason {reason!r} is not allowed; use one of {', '.join(REASONS)}")
        if cols < 1 or rows < 1:
            raise UsageError(f"snapshot size must be positive; got {cols}x{rows}")
        label, cwd, text = (self._redact(v) if self._redact else v for v in (label, cwd, text))
        data, dropped = _bounded(text, self.max_bytes)
        shell_dir = self.dir / shell_id
        # Each level its own mode: ``parents=True`` would make ``snapshots/`` itself 0755.
        for level in (self.dir, shell_dir):
            try:
                level.mkdir(mode=0o700, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:  # a file where a directory goes
                raise StorageError(
                    f"{level} is not a directory, so no snapshot can be kept there (and a shell is not "
                    f"closed without one); remove it (rm {level}) and tether makes the directory again"
                ) from exc
        self.store.ensure_schemas()
        with self.store.transaction() as conn:
            row = conn.execute(
                "SELECT MAX(taken_ms) FROM snapshots WHERE shell_id = ?", (shell_id,)
            ).fetchone()
            last = row[0] if row is not None and row[0] is not None else 0
            taken = max(int(self._clock() * 1000), last + 1)
            path = shell_dir / f"{taken}.txt"
            _write_file(path, data)
            cur = conn.execute(
                "INSERT INTO snapshots (shell_id, label, cwd, cols, rows, taken_ms, reason, actor, file, "
                "size, dropped_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (shell_id, label, cwd, cols, rows, taken, reason, actor, path.name, len(data), dropped),
            )
            snap_id = cur.lastrowid
            doomed = self._over_caps(conn, shell_id, snap_id)
            for old in doomed:
                conn.execute("DELETE FROM snapshots WHERE id = ?", (old["id"],))
        for old in doomed:
            _unlink(self.dir / old["shell_id"] / old["file"])
            if old["shell_id"] != shell_id:
                with contextlib.suppress(OSError):  # not empty: the shell still has snapshots
                    (self.dir / old["shell_id"]).rmdir()
        self._sweep(shell_id)
        found = self.get(int(snap_id or 0))
        assert found is not None
        return found

    def get(self, snapshot_id: int) -> Snapshot | None:
        rows = self.store.query("SELECT * FROM snapshots WHERE id = ?", (snapshot_id,))
        return self._snapshot(rows[0]) if rows else None

    def latest(self, shell_id: str) -> Snapshot | None:
        """The newest snapshot of ``shell_id`` (what ``shell_open from`` revives)."""
        rows = self.store.query(
            "SELECT * FROM snapshots WHERE shell_id = ? ORDER BY taken_ms DESC LIMIT 1", (shell_id,)
        )
        return self._snapshot(rows[0]) if rows else None

    def list(self, shell_id: str) -> list[Snapshot]:
        """Every kept snapshot of ``shell_id``, newest first."""
        rows = self.store.query(
            "SELECT * FROM snapshots WHERE shell_id = ? ORDER BY taken_ms DESC", (shell_id,)
        )
        return [self._snapshot(r) for r in rows]

    def read_text(self, snapshot: Snapshot) -> str:
        """The saved scrollback (invalid UTF-8 is replaced, never an error; none when its file is
        gone). Anything but a regular file in its place is a ``StorageError``, never waited on (a
        FIFO's open would wait for a writer for ever)."""
        try:
            fd = open_regular(snapshot.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENXIO, errno.EISDIR, errno.ELOOP):
                raise
            raise StorageError(
                f"{snapshot.path}, the scrollback of snapshot {snapshot.id}, is not a regular file (a "
                f"directory, a FIFO or a link was put in its place); remove it (rm -r {snapshot.path}) "
                "and the snapshot revives without its scrollback"
            ) from exc
        with os.fdopen(fd, "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    # ---- internals ------------------------------------------------------------------------

    def _over_caps(
        self, conn: sqlite3.Connection, shell_id: str, keep_id: int | None
    ) -> builtins.list[sqlite3.Row]:
        doomed: dict[int, sqlite3.Row] = {}
        mine = conn.execute(
            "SELECT id, shell_id, file, size FROM snapshots WHERE shell_id = ? ORDER BY taken_ms DESC",
            (shell_id,),
        ).fetchall()
        for old in mine[max(self.keep_per_shell, 1) :]:
            doomed[old["id"]] = old
        total = conn.execute(f"SELECT COALESCE(SUM({_ON_DISK_SQL}), 0) FROM snapshots").fetchone()[0]
        total -= sum(on_disk(r["size"]) for r in doomed.values())
        if total > self.max_total_bytes:
            for old in conn.execute("SELECT id, shell_id, file, size FROM snapshots ORDER BY taken_ms, id"):
                if total <= self.max_total_bytes:
                    break
                if old["id"] == keep_id or old["id"] in doomed:
                    continue
                doomed[old["id"]] = old
                total -= on_disk(old["size"])
        return list(doomed.values())

    def _sweep(self, shell_id: str) -> None:
        named = {
            r["file"] for r in self.store.query("SELECT file FROM snapshots WHERE shell_id = ?", (shell_id,))
        }
        shell_dir = self.dir / shell_id
        try:
            entries = list(os.scandir(shell_dir))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name.endswith(".txt") and entry.name not in named:
                _unlink(Path(entry.path))

    def _snapshot(self, row: sqlite3.Row) -> Snapshot:
        return Snapshot(
            id=row["id"],
            shell_id=row["shell_id"],
            label=row["label"],
            cwd=row["cwd"],
            cols=row["cols"],
            rows=row["rows"],
            taken_ms=row["taken_ms"],
            reason=row["reason"],
            actor=row["actor"],
            path=self.dir / row["shell_id"] / row["file"],
            size=row["size"],
            dropped_bytes=row["dropped_bytes"],
        )


def _bounded(text: str, max_bytes: int) -> tuple[bytes, int]:
    """The newest ``max_bytes`` of ``text`` as UTF-8, cut at a line start when one is near."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return data, 0
    tail = data[len(data) - max_bytes :]
    newline = tail.find(b"\n", 0, 4096)
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    else:
        while tail and (tail[0] & 0xC0) == 0x80:  # never start inside a UTF-8 sequence
            tail = tail[1:]
    return tail, len(data) - len(tail)


def _write_file(path: Path, data: bytes) -> None:
    replace_file(path, data, durable=True)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
