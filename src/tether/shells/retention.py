"""Retention of closed shells: their log, timing samples, snapshots and rows go after a while.

``[sessions] keep_closed_days`` (default 30; 0 keeps everything for ever): a shell *closed* more
than that many days ago loses ``logs/<id>.log``, ``logs/times/<id>.times`` (under
``hosts/<name>/logs`` for a remote shell's local copy), ``snapshots/<id>/`` and its rows in
``tether.db`` (``shells``, ``shell_runs``, ``shell_reads``, ``shell_enters``, ``snapshots``).

Invariants:

- only a shell whose record is closed (``closed_ms`` set) is removed, never one whose record is
  open, nor one whose tmux pane still exists on a host this process asked (a close that failed
  after its claim leaves such a pane: it is left alone until it is gone);
- the audit log is never touched: its day files keep every call, also on removed shells;
- it runs from the idle sweep (``idle.sweep_once``), and in a server that may never use a shell
  from ``keep`` (started with the server, a second after its start then at the idle sweep's
  interval), at most once an hour per home: the hour is claimed with one conditional ``UPDATE``
  of the ``retention`` row, so of two servers on one home one sweeps and the other does nothing;
- each shell's rows go in one transaction that first deletes its closed record (``closed_ms``
  older than the cut-off): a rival that deleted it first makes it skip that shell; files go after
  the commit (a crash between leaves files no row names, which the next sweep cannot find — they
  are only the bytes of a shell already forgotten);
- cheap: one read of the ``retention`` row per idle sweep, and once an hour one query for the
  candidates on ``shells_by_closed`` (the index is in the ``sessions`` schema, ``records``), at
  most ``BATCH`` shells a sweep (a backlog goes over the following hours).

The ``retention`` row also counts what was ever removed, so ``shell_open from`` an id this home
no longer knows can say that retention removed it (``gone_text``); no list of removed ids is kept
(it would grow as the rows did).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.shells.hosts import sessions_running
from tether.shells.ids import is_shell_id
from tether.shells.logs import log_path
from tether.shells.records import now_ms
from tether.shells.timing import times_path
from tether.store.db import Store, register_schema
from tether.store.snapshots import SNAPSHOTS_DIR

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence

    from tether.config import Config
    from tether.shells.domain import Shells

logger = logging.getLogger(__name__)

SETTING = "[sessions] keep_closed_days"
EVERY_MS = 3_600_000  # at most one sweep an hour per home
DAY_MS = 86_400_000
BATCH = 500  # shells removed per sweep at most: a sweep stays short even after a long pause
FIRST_S = 1.0  # a server's first sweep (``keep``), after the client's first calls

register_schema(
    "retention",
    """
    CREATE TABLE IF NOT EXISTS retention (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        last_ms INTEGER NOT NULL,
        removed INTEGER NOT NULL DEFAULT 0
    )
    """,
)


def claim(store: Store, now: int) -> bool:
    """Whether this call may sweep now: no sweep of this home (any process) in the last hour."""
    rows = store.query("SELECT last_ms FROM retention WHERE id = 1")
    if rows and rows[0]["last_ms"] > now - EVERY_MS:
        return False  # the usual answer, from a read: no write transaction every 30 s
    if not rows:
        store.execute("INSERT OR IGNORE INTO retention (id, last_ms) VALUES (1, 0)")
    # The claim itself: of two processes that both read an old time, one updates the row.
    return (
        store.execute("UPDATE retention SET last_ms = ? WHERE id = 1 AND last_ms <= ?", (now, now - EVERY_MS))
        == 1
    )


async def sweep(shells: Shells, now: int, *, start_nothing: bool = False) -> list[str]:
    """The idle sweep's part: remove what expired, if retention is on and this hour is ours.
    ``start_nothing``: this process has no open shell (see ``sweep_home``)."""

    async def panes() -> Collection[str]:
        return set(await shells.live()) | set(await shells.ended())

    return await sweep_home(shells.config, shells.store, now, panes=None if start_nothing else panes)


async def sweep_home(
    config: Config, store: Store, now: int, *, panes: Callable[[], Awaitable[Collection[str]]] | None = None
) -> list[str]:
    """Remove what expired in ``config.home``, if retention is on and this hour is ours.

    ``panes``: every pane on every host, a dead one too (a closed record whose pane is still there
    is kept). Without it, nothing is started to find them (a tmux server, a connection to a remote
    machine): this machine's tmux is asked with a plain client, only if its server runs
    (``sessions_running``), and the expired shells of remote hosts are kept until a process with a
    shell open there sweeps."""
    keep_days = config.sessions.keep_closed_days
    if keep_days <= 0 or not claim(store, now):
        return []
    cutoff = now - keep_days * DAY_MS
    rows = store.query(
        "SELECT id, host FROM shells WHERE closed_ms IS NOT NULL AND closed_ms < ? "
        "ORDER BY closed_ms LIMIT ?",
        (cutoff, BATCH),
    )
    expired = [(str(r["id"]), str(r["host"])) for r in rows]
    if not expired:
        return []  # the usual hour: tmux is not asked
    found: Collection[str] | None
    if panes is None:
        found = await sessions_running(config)
        if found is None:
            return []  # this machine's tmux could not tell: the next hour's sweep asks again
        expired = [(i, h) for i, h in expired if h == "local"]
    else:
        found = await panes()
    removed = await remove_expired(store, config.home, expired, cutoff=cutoff, panes=found)
    if removed:
        logger.info("retention removed %d shells closed over %d days ago", len(removed), keep_days)
    return removed


async def keep(config: Config) -> None:
    """Retention for a server that may never use a shell (``tether mcp``, ``tether serve``, the
    command line's tools process): ``sweep_home`` a second after the start, then at every idle
    sweep's interval, starting nothing. Between sweeps it holds no connection to the store (a
    read-only look at the ``retention`` row says whether the hour is due; a sweep once an hour per
    home opens the store and closes it). Runs until cancelled."""
    from tether.shells.domain import Shells
    from tether.shells.idle import SWEEP_S

    await asyncio.sleep(FIRST_S)
    while True:
        try:
            now = now_ms()
            # The process's own store when its shells have one: SQLite keeps a closed
            # connection's descriptors while another connection has the file open.
            shells = Shells.running(config.home)
            if shells is not None:
                await sweep_home(config, shells.store, now)
            elif config.sessions.keep_closed_days > 0 and _due(config.home, now):
                store = Store.open(config.home)
                try:
                    await sweep_home(config, store, now)
                finally:
                    store.close()
        except TetherError as exc:  # a home it cannot use: the calls say so to whoever makes one
            logger.warning("retention of closed shells did not run: %s", exc.message)
        except Exception:
            logger.exception("retention of closed shells failed")
        await asyncio.sleep(SWEEP_S)


def _due(home: Path, now: int) -> bool:
    """Whether no sweep of this home took the last hour, read without the store's connections;
    ``True`` when it cannot tell (no database or table yet: the sweep's own claim decides)."""
    try:
        conn = sqlite3.connect(f"{(home / 'tether.db').absolute().as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT last_ms FROM retention WHERE id = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return True
    return row is None or int(row[0]) <= now - EVERY_MS


async def remove_expired(
    store: Store, home: Path, expired: Sequence[tuple[str, str]], *, cutoff: int, panes: Collection[str]
) -> list[str]:
    """Remove the shells of ``expired`` (id, host) whose record was closed before ``cutoff``
    (epoch ms), except those in ``panes`` (a tmux pane of theirs still exists); returns the ids
    removed. Does not claim the hour: the caller does (``sweep``).

    It gives the event loop its turn after each shell: a first sweep over a home with a backlog
    removes ``BATCH`` shells, several seconds on a busy machine, and calls must not wait for all
    of it."""
    removed: list[str] = []
    for shell_id, host in expired:
        if shell_id in panes or not is_shell_id(shell_id):
            continue
        with store.transaction() as conn:
            gone = conn.execute(
                "DELETE FROM shells WHERE id = ? AND closed_ms IS NOT NULL AND closed_ms < ?",
                (shell_id, cutoff),
            ).rowcount
            if gone == 1:
                for table in ("shell_runs", "shell_reads", "shell_enters", "snapshots"):
                    conn.execute(f"DELETE FROM {table} WHERE shell_id = ?", (shell_id,))  # fixed names
                conn.execute("UPDATE retention SET removed = removed + 1 WHERE id = 1")
        if gone == 1:  # else removed meanwhile by another process's sweep
            _remove_files(home, shell_id, host)
            removed.append(shell_id)
        await asyncio.sleep(0)
    return removed


def removed_any(store: Store) -> bool:
    """Whether retention ever removed a shell of this home (so an unknown id may be one)."""
    rows = store.query("SELECT removed FROM retention WHERE id = 1")
    return bool(rows and rows[0]["removed"])


def gone_text(shell_id: str, keep_days: int) -> str:
    """What a call naming a shell this home no longer knows is told, once retention has run."""
    return (
        f"no shell {shell_id} is known in this home, so there is no snapshot to revive: a shell closed "
        f"more than {SETTING} ({keep_days}) days ago has its snapshots, log and records removed by "
        f"retention (raise {SETTING}, or set it to 0 to keep closed shells for ever), or the id is "
        "mistyped; shell_state scope='*' lists live shells"
    )


def unknown_note(store: Store, keep_days: int) -> str:
    """What a call naming an id this home does not know adds, once retention removed a shell."""
    if not removed_any(store):
        return ""
    return (
        f" (a shell closed more than {SETTING} ({keep_days}) days ago has its log, snapshots and "
        "records removed by retention)"
    )


def _remove_files(home: Path, shell_id: str, host: str) -> None:
    logs_dir = home / "logs" if host == "local" else home / "hosts" / host / "logs"
    for path in (log_path(logs_dir, shell_id), times_path(logs_dir, shell_id)):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            path.unlink()
    # ``is_shell_id`` held (the caller checked): the name cannot leave the directory.
    shutil.rmtree(home / SNAPSHOTS_DIR / shell_id, ignore_errors=True)
