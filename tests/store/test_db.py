"""The SQLite store: schemas applied once, transactions, and several processes opening a new home."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

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
