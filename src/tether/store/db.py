"""The SQLite store (``$TETHER_HOME/tether.db``), opened in WAL mode.

Invariant: every cross-process fact (shell records, locks, macros, vault items, snapshots,
workspaces) is written inside one ``IMMEDIATE`` transaction, so several tether processes sharing a
home never interleave half-written records. Feature modules declare their own tables with
``register_schema``; ``Store.open`` applies every registered schema idempotently.

A write the file system refuses (full, read-only) is a ``StorageError`` naming the database, and
its transaction is rolled back, never left open for the next one to join. So is a database tether
cannot use: not one at all, damaged (at open or at the first statement that meets the damage), or
of another shape (a table of another program or version lacking a column tether reads, or holding
one it does not fill) — each message says to move the file aside. A database a later tether wrote
(``STORE_VERSION``) is refused too, saying to run that version: moving it aside would lose it.

Connections are per thread (``sqlite3`` objects must not cross threads); async callers run the
short statements inline — each is sub-millisecond on a local WAL database.

Checkpoints off the committing thread: SQLite's automatic checkpoint runs inside the commit that
takes the WAL past 1,000 pages, copying them into the database and syncing it: 3-6 ms, once every
~200 shell runs, on the event loop of the call that happened to commit. Here, every
``CHECKPOINT_EVERY`` commits, a short thread of the store's own runs passive checkpoints (they
never wait for a lock; writers go on meanwhile) on a connection of its own, and ends. SQLite's own
stays on as a backstop at ``_BACKSTOP_PAGES``, which only writes that never pause reach: it keeps
the WAL bounded, and ``journal_size_limit`` shrinks the file back when the WAL starts over.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.errors import StorageError

# Commits between two checkpoints: a shell run commits ~5 pages, so about SQLite's own 1,000.
CHECKPOINT_EVERY = 200
_BACKSTOP_PAGES = 4000  # 16 MiB of WAL (SQLite's default is 1,000 pages)
_PASSES = 5
_WAL_KEPT_BYTES = 4 << 20
# What SQLite answers when the file system refuses a write (full, read-only, an I/O error): the
# machine's condition, a ``StorageError`` like any other write of tether's the file system refuses.
_STORAGE_CODES = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR})
# What SQLite answers when ``tether.db`` is not a database (overwritten, truncated): the file's
# condition, which only a person can settle. (SQLITE_CANTOPEN is that only when something else
# stands in its place: it is also what too few descriptors or an unwritable directory give.)
_UNUSABLE_CODES = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})
_SCHEMAS: dict[str, str] = {}
_COLUMNS: dict[str, tuple[tuple[str, str, str], ...]] = {}
# The store's version, kept in the database's header (``PRAGMA user_version``). A version of tether
# reads and writes a database of its own version or below (a lower one is brought up on open: the
# ``added`` columns, new tables); it refuses a higher one, which a later tether wrote and may hold
# what this one would misread. So it grows only with a change an earlier tether cannot live with
# (a column it must fill, a meaning changed); an ``added`` column with a default, or a new table,
# needs none. Databases of the versions before it was kept hold 0.
STORE_VERSION = 1


def register_schema(name: str, ddl: str, *, added: tuple[tuple[str, str, str], ...] = ()) -> None:
    """Declare a feature's tables (``CREATE TABLE IF NOT EXISTS …``); applied on open. ``added``
    lists ``(table, column, declaration)`` columns a later version added: a database made before
    gets them (``ALTER TABLE … ADD COLUMN``), one made after has them from its ``CREATE``."""
    _SCHEMAS[name] = ddl
    _COLUMNS[name] = added


class Store:
    """One database file; a connection per thread, each in WAL mode with a busy timeout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._applied: set[str] = set()
        self._commits = 0
        self._checkpointer: threading.Thread | None = None

    @classmethod
    def open(cls, home: Path) -> Store:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        store = cls(home / "tether.db")
        try:
            store.ensure_schemas()
        except BaseException:  # a database tether cannot use: its connection is not left open
            store.close()
            raise
        return store

    def ensure_schemas(self) -> None:
        """Apply every registered schema not yet applied through this object."""
        if len(self._applied) == len(_SCHEMAS):  # every statement asks: the answer is nearly always yes
            return
        pending = {k: v for k, v in _SCHEMAS.items() if k not in self._applied}
        if not pending:
            return
        with self.transaction() as conn:
            if not self._applied:  # the first schemas this object applies: the whole store's version
                self._check_version(conn)
            for name, ddl in pending.items():
                try:
                    for statement in _statements(ddl):
                        conn.execute(statement)
                except sqlite3.OperationalError as exc:  # an index on a column the table lacks
                    if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_ERROR:
                        raise
                    raise self._other_shape(str(exc)) from exc
                for table, column, decl in _COLUMNS.get(name, ()):
                    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                    if column not in have:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                for table, wanted in _shape(name).items():
                    _check_shape(self, conn, table, wanted)
                self._applied.add(name)

    def _check_version(self, conn: sqlite3.Connection) -> None:
        """Refuse a store a later tether wrote (``STORE_VERSION``); mark an earlier one as this
        version's (the schemas applied next in the same transaction bring it up)."""
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > STORE_VERSION:
            raise StorageError(
                f"{self.path} was written by a later version of tether (store version {version}; "
                f"this one reads up to {STORE_VERSION}): run that version again (pip install -U "
                f"tether, or the same version as your other tether processes); moving the file "
                "aside would lose the records, locks, macros and vault items it holds"
            )
        if version < STORE_VERSION:
            conn.execute(f"PRAGMA user_version = {STORE_VERSION}")

    def _other_shape(self, why: str) -> StorageError:
        return StorageError(
            f"{self.path} was made by another version of tether or another program ({why}); "
            f"move it aside (mv {self.path} {self.path}.broken) and tether starts a new one: the "
            "shells live on in tmux, the records, locks, macros and vault items it held do not"
        )

    def _unusable(self, exc: sqlite3.Error) -> StorageError | None:
        """The ``StorageError`` for what SQLite answered, when it is the file's or the file system's
        condition rather than tether's mistake (``None``: it is a bug, raised as it is)."""
        code = exc.sqlite_errorcode & 0xFF
        if code in _STORAGE_CODES:
            return StorageError(
                f"the file system refused tether's write to {self.path} ({exc}{self._room(code)}); "
                "free space there, or make it writable, and call again"
            )
        if code in _UNUSABLE_CODES:
            return self._not_a_database(exc)
        return None

    def _room(self, code: int) -> str:
        """How much room the database's file system has, for an answer that does not say it: a full
        disk reaches SQLite as "disk I/O error" too (growing the WAL index of a database opened
        anew, ``SQLITE_IOERR_SHMSIZE``), which reads as a failing drive."""
        if code not in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL):
            return ""
        try:
            found = os.statvfs(self.path.parent)
        except OSError:
            return ""
        free = found.f_bavail * found.f_frsize
        return f"; {free // 1024} KiB free on its file system" if free < 1 << 30 else ""

    def _not_a_database(self, exc: sqlite3.Error) -> StorageError:
        return StorageError(
            f"{self.path} is not a database tether can open ({exc}); move it aside "
            f"(mv {self.path} {self.path}.broken) and tether starts a new one: the shells "
            "live on in tmux, the records, locks, macros and vault items it held do not"
        )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            _private_file(self.path)
            try:
                conn = self._connect()
            except sqlite3.Error as exc:
                code = exc.sqlite_errorcode & 0xFF
                if code == sqlite3.SQLITE_CANTOPEN and not _stands_in_place(self.path):
                    raise StorageError(
                        f"{self.path} cannot be opened ({exc}); make its directory writable, or "
                        "let this process open more files, and call again"
                    ) from exc
                if code == sqlite3.SQLITE_CANTOPEN:  # something else stands in its place
                    raise self._not_a_database(exc) from exc
                unusable = self._unusable(exc)
                if unusable is None:
                    raise
                raise unusable from exc
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout=30000")
            _enter_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            # Checkpoints are the store's thread's; SQLite's own only when they cannot keep up.
            conn.execute(f"PRAGMA wal_autocheckpoint={_BACKSTOP_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={_WAL_KEPT_BYTES}")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): the write lock is taken first."""
        conn = self._conn()
        if conn.in_transaction:  # nested use joins the outer transaction
            yield conn
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (a full disk) may leave the transaction open or have rolled it
                # back already; left open, the next ``transaction`` would join it and never commit.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            unusable = self._unusable(exc)
            if unusable is None:
                raise
            raise unusable from exc
        self._committed()

    def _committed(self) -> None:
        with self._lock:
            self._commits += 1
            running = self._checkpointer is not None and self._checkpointer.is_alive()
            if self._commits < CHECKPOINT_EVERY or running:
                return  # one still running takes this commit's pages too, or the next one will
            self._commits = 0
            self._checkpointer = threading.Thread(target=self._checkpoint, name="tether-store-checkpoint")
            self._checkpointer.start()

    def _checkpoint(self) -> None:
        try:
            # A connection of its own, closed here: the thread-local ones live as long as the store.
            # SQLite starts the WAL over (and truncates it to _WAL_KEPT_BYTES) at the first write
            # after every frame in it was copied; the commits that came during a pass left frames
            # behind, so the passes go on until one finds nothing new (or readers hold frames back).
            # `mode=rw`: a database removed meanwhile is not made again (with the umask's mode).
            conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=rw", uri=True, isolation_level=None)
            try:
                last = -1
                for _ in range(_PASSES):
                    _busy, log, moved = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if log != moved or log == last:
                        break
                    last = log
            finally:
                conn.close()
        except sqlite3.Error:
            pass  # the store was removed or is busy: the next CHECKPOINT_EVERY commits try again

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        self.ensure_schemas()
        try:
            return list(self._conn().execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            unusable = self._unusable(exc)
            if unusable is None:
                raise
            raise unusable from exc

    def execute(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> int:
        """Run one write statement in its own transaction; returns the affected row count."""
        self.ensure_schemas()
        with self.transaction() as conn:
            return conn.execute(sql, params).rowcount

    def close(self) -> None:
        with self._lock:
            checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.join()
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch a fresh database to WAL, tolerating processes that race to create it.

    Changing the journal mode needs an exclusive lock and SQLite does not apply the busy handler
    to it, so two processes opening a brand-new home at once can see "database is locked" here;
    retry with a short back-off until the busy timeout would have expired.
    """
    deadline = time.monotonic() + 30.0
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


_SHAPES: dict[str, dict[str, frozenset[str]]] = {}


def _shape(name: str) -> dict[str, frozenset[str]]:
    """The tables a registered schema makes and the columns of each (``added`` ones included: the
    ``CREATE`` declares them too), built once per process in a database of its own in memory."""
    shape = _SHAPES.get(name)
    if shape is None:
        conn = sqlite3.connect(":memory:")
        try:
            for statement in _statements(_SCHEMAS[name]):
                conn.execute(statement)
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            shape = {t: frozenset(row[1] for row in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
        finally:
            conn.close()
        _SHAPES[name] = shape
    return shape


def _check_shape(store: Store, conn: sqlite3.Connection, table: str, wanted: frozenset[str]) -> None:
    """Refuse a table that lacks a column tether uses, or holds a ``NOT NULL`` one without a
    default that tether does not fill (a later version's, another program's): every statement on
    it would fail, each as a bare SQLite error."""
    have = list(conn.execute(f"PRAGMA table_info({table})"))  # cid, name, type, notnull, default, pk
    missing = sorted(wanted - {row[1] for row in have})
    if missing:
        raise store._other_shape(f"table {table} has no column {missing[0]}")
    unfilled = [row[1] for row in have if row[1] not in wanted and row[3] and row[4] is None and not row[5]]
    if unfilled:
        raise store._other_shape(
            f"table {table} has a column {unfilled[0]} that this version of tether does not fill"
        )


def _stands_in_place(path: Path) -> bool:
    """Whether something that is not a regular file has the database's name (a directory)."""
    try:
        return not path.is_file() and path.exists()
    except OSError:
        return False


def _statements(ddl: str) -> Iterator[str]:
    """The statements of a script, each whole (a trigger's body holds ``;`` of its own)."""
    pending = ""
    for part in ddl.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\n;"):
                yield pending
            pending = ""
    if pending.strip(" \t\n;"):
        yield pending


def _private_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would use the umask, typically 0644).

    SQLite gives its ``-wal`` and ``-shm`` files the database file's permissions, so those are
    private too. A database left readable by an older version is tightened the same way.

    An existing database is never opened here: closing any descriptor of a file drops every POSIX
    lock this process holds on it, SQLite's included (another thread's connection keeps its lock
    only while no other descriptor of the file is closed). Without its lock, the next connection
    of another process to close believes it is the last one and deletes the ``-wal`` and ``-shm``
    this process still writes to, so its later commits reach no other process. So: ``O_EXCL``
    (no descriptor when the file exists) and ``chmod`` by path.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if os.stat(path).st_mode & 0o077:
            for name in (str(path), f"{path}-wal", f"{path}-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(name, 0o600)
        return
    # Nothing else has this brand-new file open, so closing it drops no lock.
    os.close(fd)
