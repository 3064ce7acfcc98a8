"""The SQLite store: schemas applied once, transactions, several processes opening a new home, and
checkpoints that never run inside a commit."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hang import HANG_S
from tether.errors import StorageError
from tether.store import db
from tether.store.db import Store, register_schema

register_schema("test_db_counter", "CREATE TABLE IF NOT EXISTS test_counter (n INTEGER NOT NULL)")
register_schema("test_db_pages", "CREATE TABLE IF NOT EXISTS test_pages (b BLOB NOT NULL)")


ROUNDS = 12
RACERS = 3


def _race(homes: list[str], start: Any) -> None:
    # Imported, then every round starts at one barrier: each racer opens the same brand-new home
    # at the same moment, however slowly the machine spawned the interpreters.
    try:
        for home in homes:
            start.wait()
            store = Store.open(Path(home))
            store.execute("INSERT INTO test_counter (n) VALUES (1)")
            store.close()
    except BaseException:
        start.abort()  # the others stop at the next round instead of waiting for this racer
        raise


def test_processes_racing_to_create_a_home_all_succeed(tmp_path: Path) -> None:
    # Switching a brand-new database to WAL needs an exclusive lock that SQLite's busy handler
    # does not cover; every racer must still open the store. Three interpreters race twelve rounds:
    # no deadline but the suite's own timeout, so a loaded machine only makes it slower.
    ctx = multiprocessing.get_context("spawn")
    homes = [str(tmp_path / f"home{round_}") for round_ in range(ROUNDS)]
    start = ctx.Barrier(RACERS)
    procs = [ctx.Process(target=_race, args=(homes, start)) for _ in range(RACERS)]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            if proc.is_alive():  # only when the test itself was interrupted
                proc.kill()
                proc.join()
    assert [p.exitcode for p in procs] == [0] * RACERS
    for home in homes:
        store = Store.open(Path(home))
        assert store.query("SELECT count(*) AS c FROM test_counter")[0]["c"] == RACERS
        assert store.query("PRAGMA journal_mode")[0][0] == "wal"
        store.close()


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with pytest.raises(RuntimeError), store.transaction() as conn:
        conn.execute("INSERT INTO test_counter (n) VALUES (7)")
        raise RuntimeError("boom")
    assert store.query("SELECT count(*) AS c FROM test_counter")[0]["c"] == 0
    store.close()


_OTHER_PROCESS = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(conn.execute("SELECT count(*) FROM test_counter").fetchone()[0])
conn.close()
"""


def _count_in_another_process(path: Path) -> int:
    # Another tether process (a CLI command, a second `tether mcp`): it opens the database, reads,
    # and closes its connection, which deletes the -wal and -shm if it thinks it was the last one.
    done = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(path)], capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_new_thread_connection_keeps_this_process_lock_on_the_database(tmp_path: Path) -> None:
    # A connection opened on another thread (an event loop's worker thread) must not drop the
    # lock the first connection holds: without it, another process closing its connection
    # deletes the -wal this process still writes to, and every later commit of this process stays
    # invisible to other processes until it exits.
    store = Store.open(tmp_path)
    store.execute("INSERT INTO test_counter (n) VALUES (1)")
    worker = threading.Thread(target=lambda: store.query("SELECT count(*) FROM test_counter"))
    worker.start()
    worker.join()
    assert _count_in_another_process(store.path) == 1
    assert Path(f"{store.path}-wal").exists()
    store.execute("INSERT INTO test_counter (n) VALUES (2)")
    assert _count_in_another_process(store.path) == 2
    store.close()


def _write_pages(store: Store, commits: int) -> None:
    """``commits`` commits of ~5 pages each (a 12 kB blob: overflow pages and a leaf), ~20 kB of WAL."""
    for _ in range(commits):
        store.execute("INSERT INTO test_pages (b) VALUES (?)", (os.urandom(12_000),))


def _frames_in_wal(path: Path) -> int:
    """Frames in the WAL since it last started over, read by a passive checkpoint of the test's own."""
    probe = sqlite3.connect(path, isolation_level=None)
    try:
        return int(probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        probe.close()


def _join_checkpointers() -> None:
    for thread in threading.enumerate():
        if thread.name == "tether-store-checkpoint":
            thread.join(HANG_S)
            assert not thread.is_alive()


def test_no_commit_checkpoints_on_the_committing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's own checkpoint runs inside the commit that takes the WAL past 1,000 pages (3-6 ms on
    # the event loop of whichever call committed) and the next write starts the WAL over. With the
    # store's thread held off, ~1,500 frames stay in the WAL: no commit copied them.
    monkeypatch.setattr(db, "CHECKPOINT_EVERY", 10**9)
    store = Store.open(tmp_path)
    _write_pages(store, 300)
    assert _frames_in_wal(store.path) > 1_100
    store.close()


def test_the_stores_thread_checkpoints_and_the_wal_starts_over_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The 300th commit starts the thread; once it is done, the next write starts the WAL over from
    # its first frame and cuts the file (~6 MB by then) back to 4 MiB. The thread's connection,
    # closed at its end, leaves this process's lock in place: another process closing its own
    # connection does not delete the WAL this process still writes to.
    monkeypatch.setattr(db, "CHECKPOINT_EVERY", 300)
    store = Store.open(tmp_path)
    _write_pages(store, 300)
    wal = Path(f"{store.path}-wal")
    assert wal.stat().st_size > 5 << 20
    _join_checkpointers()
    store.execute("INSERT INTO test_counter (n) VALUES (1)")
    assert _frames_in_wal(store.path) < 10
    assert wal.stat().st_size <= 4 << 20
    assert _count_in_another_process(store.path) == 1
    store.execute("INSERT INTO test_counter (n) VALUES (2)")
    assert _count_in_another_process(store.path) == 2
    store.close()


def test_the_checkpoint_never_makes_a_removed_database_again(tmp_path: Path) -> None:
    # A home removed while its store is open (a test's teardown, a user's rm -r): a checkpoint
    # that opened the database by path would create an empty one, with the umask's mode.
    store = Store.open(tmp_path)
    store.execute("INSERT INTO test_counter (n) VALUES (1)")
    store.close()
    for name in ("tether.db", "tether.db-wal", "tether.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    store._checkpoint()
    assert not (tmp_path / "tether.db").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (needs root)")
def test_a_full_disk_is_a_storage_error_and_the_store_writes_again_after(tmp_path: Path) -> None:
    """The database on a full file system: every tool that writes the store (``shell_open``,
    ``shell_run``, ``shell_send``, locks, the vault) was an internal error with a traceback
    (``sqlite3.OperationalError: database or disk is full``). It is a ``StorageError`` naming the
    database, the failed transaction is rolled back, and the next write after space is freed works."""
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(home)], check=True)
    try:
        store = Store.open(home)
        store.execute("INSERT INTO test_pages (b) VALUES (?)", (b"a",))
        filler = home / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        with pytest.raises(StorageError) as full:
            for _ in range(64):  # new pages, past whatever the WAL's last page still holds
                store.execute("INSERT INTO test_pages (b) VALUES (?)", (os.urandom(16384),))
        assert full.value.code == "STORAGE_UNAVAILABLE"
        assert full.value.message.startswith(f"the file system refused tether's write to {home}/tether.db ")
        assert full.value.message.endswith("free space there, or make it writable, and call again")
        filler.unlink()
        store.execute("DELETE FROM test_pages WHERE length(b) > 1")
        store.execute("INSERT INTO test_pages (b) VALUES (?)", (b"after",))
        rows = [bytes(r[0]) for r in store.query("SELECT b FROM test_pages")]
        assert rows == [b"a", b"after"], rows
        store.close()
        other = Store.open(home)  # another connection sees it: the write was committed
        assert len(other.query("SELECT b FROM test_pages")) == 2
        other.close()
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_a_database_that_is_not_one_is_a_storage_error_naming_the_fix(tmp_path: Path, kind: str) -> None:
    # It was a bare sqlite3 error, which every door reported as "INTERNAL: … failed unexpectedly".
    path = tmp_path / "tether.db"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"this is no SQLite database\n" * 200)
    with pytest.raises(StorageError) as info:
        Store.open(tmp_path)
    assert info.value.code == "STORAGE_UNAVAILABLE"
    assert f"{path} is not a database tether can open" in info.value.message
    assert f"mv {path} {path}.broken" in info.value.message


def _wreck_table(path: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with bytes no page holds: the schema still reads, so the
    database opens, and only a statement that reaches that table finds the damage."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    conn.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_database_damaged_past_its_schema_is_a_storage_error_at_the_statement(tmp_path: Path) -> None:
    # A page of a table overwritten (a disk error, a crash of another program): the database opened
    # and its schema applied, and the first statement that met the page was a bare
    # "sqlite3.DatabaseError: database disk image is malformed", an INTERNAL error with a traceback.
    store = Store.open(tmp_path)
    store.execute("INSERT INTO test_pages (b) VALUES (?)", (b"kept",))
    store.close()
    _wreck_table(tmp_path / "tether.db", "test_pages")
    store = Store.open(tmp_path)
    path = tmp_path / "tether.db"
    for attempt in (
        lambda: store.query("SELECT b FROM test_pages"),
        lambda: store.execute("INSERT INTO test_pages (b) VALUES (?)", (b"new",)),
    ):
        with pytest.raises(StorageError) as info:
            attempt()
        assert info.value.code == "STORAGE_UNAVAILABLE"
        assert (
            f"{path} is not a database tether can open (database disk image is malformed)"
            in info.value.message
        )
        assert f"mv {path} {path}.broken" in info.value.message
    store.execute("INSERT INTO test_counter (n) VALUES (1)")  # an undamaged table still serves
    assert len(store.query("SELECT n FROM test_counter")) == 1
    store.close()


register_schema(
    "test_db_shape",
    "CREATE TABLE IF NOT EXISTS test_shape (id TEXT PRIMARY KEY, label TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS test_shape_by_label ON test_shape (label)",
)


@pytest.mark.parametrize(
    ("table", "why"),
    [
        # Another program's table of the same name, or a version that had no such column: the
        # index on it is the first to fail, or the check of its columns when it has none.
        ("CREATE TABLE test_shape (id TEXT PRIMARY KEY)", "no such column: label"),
        ("CREATE TABLE test_shape (id TEXT PRIMARY KEY, name TEXT)", "no such column: label"),
        ("CREATE TABLE test_shape (label TEXT)", "table test_shape has no column id"),
        # A later version's column this one does not fill: every insert would fail.
        (
            "CREATE TABLE test_shape (id TEXT PRIMARY KEY, label TEXT NOT NULL DEFAULT '', "
            "kind TEXT NOT NULL)",
            "table test_shape has a column kind that this version of tether does not fill",
        ),
    ],
)
def test_a_database_of_another_shape_is_a_storage_error_naming_the_table(
    tmp_path: Path, table: str, why: str
) -> None:
    # A tether.db written by another version (or another program): the first statement on the
    # table was "no such column" or "NOT NULL constraint failed", an INTERNAL error with a traceback.
    conn = sqlite3.connect(tmp_path / "tether.db")
    conn.execute(table)
    conn.commit()
    conn.close()
    path = tmp_path / "tether.db"
    with pytest.raises(StorageError) as info:
        Store.open(tmp_path)
    # The refused store's connection is closed: no descriptor of this process is left on the
    # database (a count of all of them also saw a garbage collection close earlier tests' ones).
    assert _open_under(tmp_path) == []
    assert info.value.code == "STORAGE_UNAVAILABLE"
    assert f"{path} was made by another version of tether or another program ({why})" in info.value.message
    assert f"mv {path} {path}.broken" in info.value.message


def _open_under(directory: Path) -> list[str]:
    """What this process holds open under ``directory``."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{directory}/"):
            held.append(target)
    return held
