"""The SQLite store: schemas applied once, transactions, and several processes opening a new home."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hang import HANG_S
from tether.store.db import Store, register_schema

register_schema("test_db_counter", "CREATE TABLE IF NOT EXISTS test_counter (n INTEGER NOT NULL)")


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
