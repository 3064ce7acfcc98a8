"""The SQLite store: schemas applied once, transactions, and several processes opening a new home."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tether.store.db import Store, register_schema

register_schema("test_db_counter", "CREATE TABLE IF NOT EXISTS test_counter (n INTEGER NOT NULL)")


def _open_and_write(home: str) -> None:
    store = Store.open(Path(home))
    store.execute("INSERT INTO test_counter (n) VALUES (1)")
    store.close()


def test_processes_racing_to_create_a_home_all_succeed(tmp_path: Path) -> None:
    # Switching a brand-new database to WAL needs an exclusive lock that SQLite's busy handler
    # does not cover; every racer must still open the store.
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(6):
        home = tmp_path / f"home{round_}"
        procs = [ctx.Process(target=_open_and_write, args=(str(home),)) for _ in range(3)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(30)
        assert [p.exitcode for p in procs] == [0, 0, 0]
        store = Store.open(home)
        assert store.query("SELECT count(*) AS c FROM test_counter")[0]["c"] == 3
        assert store.query("PRAGMA journal_mode")[0][0] == "wal"
        store.close()


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with pytest.raises(RuntimeError), store.transaction() as conn:
        conn.execute("INSERT INTO test_counter (n) VALUES (7)")
        raise RuntimeError("boom")
    assert store.query("SELECT count(*) AS c FROM test_counter")[0]["c"] == 0
    store.close()
