"""A ``tether.db`` another version of tether wrote: an earlier one's is brought up and keeps its
records, a later one's is refused saying to run that version (never "move it aside").

The earlier home is ``fixtures/tether-db-<rev>.sql``, the dump of a database that version's own
``tether mcp`` wrote (``fixtures/make_old_store.py`` made it once; no git history is read here)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import tether.shells.records
import tether.shells.retention
import tether.store.approvals
import tether.store.conversations
import tether.store.macros
import tether.store.manual_locks
import tether.store.snapshots
import tether.store.vault.vault
import tether.store.workspaces  # noqa: F401  (with the imports above: every table of tether's)
from tether.errors import StorageError
from tether.shells.records import Records
from tether.store.db import STORE_VERSION, Store

FIXTURES = Path(__file__).parent / "fixtures"
# Made by the version of 2026-12-02 07:50: its approvals have no asker_process, and it has no
# retention or vault_delivered table yet.
EARLIER = FIXTURES / "tether-db-ac0b900.sql"


def _restore(dump: Path, home: Path) -> Path:
    path = home / "tether.db"
    conn = sqlite3.connect(path)
    try:
        conn.executescript(dump.read_text())
    finally:
        conn.close()
    return path


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        return version
    finally:
        conn.close()


def test_a_store_an_earlier_tether_wrote_is_brought_up_and_keeps_its_records(tmp_path: Path) -> None:
    path = _restore(EARLIER, tmp_path)
    assert _version(path) == 0  # before the store kept its version
    store = Store.open(tmp_path)
    try:
        shells = Records(store).shells()  # the shells it had open, with their labels
        assert sorted(r.label for r in shells.values()) == ["kept"]
        (closed,) = [r["shell_id"] for r in store.query("SELECT DISTINCT shell_id FROM snapshots")]
        assert closed not in shells and Records(store).any_shell(closed) is not None
        columns = {r[1] for r in store.query("PRAGMA table_info(approvals)")}
        assert "asker_process" in columns
        assert [r["name"] for r in store.query("SELECT name FROM vault_items")] == ["TOKEN"]
    finally:
        store.close()
    assert _version(path) == STORE_VERSION


def test_a_store_a_later_tether_wrote_is_refused_saying_to_run_that_version(tmp_path: Path) -> None:
    # A downgrade (a later tether's home, this version's code): the store opened as if it were
    # this version's own, whatever the later one had changed in it.
    Store.open(tmp_path).close()
    path = tmp_path / "tether.db"
    assert _version(path) == STORE_VERSION
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {STORE_VERSION + 1}")
    conn.close()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(StorageError) as info:
        Store.open(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before  # the refused store's connection is closed
    assert info.value.code == "STORAGE_UNAVAILABLE"
    assert info.value.message.startswith(
        f"{path} was written by a later version of tether (store version {STORE_VERSION + 1}; "
        f"this one reads up to {STORE_VERSION}): run that version again"
    ), info.value.message
    assert ".broken" not in info.value.message
    assert _version(path) == STORE_VERSION + 1  # left as it was
