"""The vault store: encryption at rest, passphrase groups, shared unlocks with expiry, key file rules."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hang import HANG_S
from tether.config import load_config
from tether.errors import NotFoundError, RefusedError, UsageError
from tether.store.db import Store
from tether.store.vault import Vault, VaultKeyError, VaultLockedError, VaultSettings, vault_settings
from tether.store.vault.crypto import create_master_key, read_master_key

CANARY = "tether-canary-7f3Qz9!pX"
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _close_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``Store`` a test opens is closed at teardown: no connection outlives its test."""
    opened: list[Store] = []
    real_open = Store.open.__func__  # type: ignore[attr-defined]

    def tracked(cls: type[Store], home: Path) -> Store:
        store: Store = real_open(cls, home)
        opened.append(store)
        return store

    monkeypatch.setattr(Store, "open", classmethod(tracked))
    yield
    for store in opened:
        store.close()


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _vault(home: Path, clock: Clock | None = None, store: Store | None = None) -> Vault:
    return Vault(store or Store.open(home), home, clock=clock or Clock())


def _disk_bytes(home: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in home.rglob("*") if p.is_file()}


def test_values_round_trip_and_listing_never_holds_values(tether_home: Path) -> None:
    vault = _vault(tether_home)
    vault.set("API_TOKEN", CANARY)
    vault.set("db-pass", "second", group="ops")
    assert vault.resolve("API_TOKEN") == CANARY
    assert vault.resolve("db-pass") == "second"
    listing = vault.list()
    assert [(i.name, i.group, i.locked) for i in listing.items] == [
        ("API_TOKEN", "default", False),
        ("db-pass", "ops", False),
    ]
    assert [(g.name, g.protected, g.items) for g in listing.groups] == [
        ("default", False, 1),
        ("ops", False, 1),
    ]
    assert CANARY not in repr(listing)
    assert (tether_home / "vault.key").stat().st_mode & 0o777 == 0o600
    vault.set("API_TOKEN", "replaced")
    assert vault.resolve("API_TOKEN") == "replaced"


def test_nothing_on_disk_holds_a_value_or_passphrase_in_clear(tether_home: Path) -> None:
    vault = _vault(tether_home)
    vault.set("PLAIN", CANARY + "-plain")
    vault.create_group("prod", PASSPHRASE)
    vault.unlock("prod", PASSPHRASE)
    vault.set("LOCKED", CANARY + "-locked", group="prod")
    assert vault.resolve("LOCKED") == CANARY + "-locked"
    files = _disk_bytes(tether_home)
    assert {"tether.db", "vault.key"} <= {Path(p).name for p in files}
    assert any(p.endswith("tether.db-wal") for p in files), "the WAL must be searched too"
    needles = [PASSPHRASE.encode()]
    for value in (CANARY + "-plain", CANARY + "-locked"):
        raw = value.encode()
        needles += [raw, raw.hex().encode(), base64.b64encode(raw), value.encode("utf-16-le")]
    for path, data in files.items():
        for needle in needles:
            assert needle not in data, f"{path} holds {needle!r} in clear"


def test_wrong_passphrase_is_refused_and_changes_nothing(tether_home: Path) -> None:
    vault = _vault(tether_home)
    vault.create_group("prod", PASSPHRASE)
    with pytest.raises(RefusedError, match="wrong passphrase for vault group 'prod'") as caught:
        vault.unlock("prod", "not it")
    assert caught.value.code == "REFUSED"
    assert vault.group_info("prod").locked
    with pytest.raises(RefusedError, match="wrong passphrase"):
        vault.set("X", "v", group="prod", passphrase="not it")
    assert vault.list().items == ()


def test_locked_group_refuses_until_unlocked_and_lock_is_seen_by_another_store(tether_home: Path) -> None:
    clock = Clock()
    vault = _vault(tether_home, clock)
    vault.create_group("prod", PASSPHRASE)
    with pytest.raises(VaultLockedError, match="locked"):
        vault.set("DB", CANARY, group="prod")
    vault.set(
        "DB", CANARY, group="prod", passphrase=PASSPHRASE
    )  # storing with the passphrase leaves it locked
    other = _vault(tether_home, clock, store=Store.open(tether_home))  # its own connections
    with pytest.raises(VaultLockedError) as caught:
        other.resolve("DB")
    assert caught.value.group == "prod" and caught.value.code == "REFUSED"
    assert "tether vault unlock prod" in caught.value.message and CANARY not in caught.value.message
    info = vault.unlock("prod", PASSPHRASE, minutes=5)
    assert not info.locked and info.unlocked_until_ms == int(clock.now * 1000) + 5 * 60_000
    assert other.resolve("DB") == CANARY
    vault.set("OPEN", "open")
    assert other.readable_values() == {"DB": CANARY, "OPEN": "open"}
    assert vault.lock("prod") is True
    assert other.readable_values() == {"OPEN": "open"}
    with pytest.raises(VaultLockedError):
        other.resolve("DB")
    assert other.list().items[0].locked
    assert vault.lock("prod") is False


def test_unlock_expires_for_every_process(tether_home: Path) -> None:
    clock = Clock()
    vault = _vault(tether_home, clock)
    vault.create_group("prod", PASSPHRASE)
    vault.set("DB", CANARY, group="prod", passphrase=PASSPHRASE)
    vault.unlock("prod", PASSPHRASE, minutes=1)
    later = Clock(clock.now + 59)
    assert _vault(tether_home, later).resolve("DB") == CANARY
    later.now = clock.now + 60
    reader = _vault(tether_home, later)
    with pytest.raises(VaultLockedError):
        reader.resolve("DB")
    assert reader.group_info("prod").locked and reader.group_info("prod").unlocked_until_ms is None


_RESOLVE_SCRIPT = """
import sys
from pathlib import Path
from tether.store.db import Store
from tether.store.vault import Vault, VaultLockedError
home = Path(sys.argv[1])
try:
    print("value:" + Vault(Store.open(home), home).resolve("DB"))
except VaultLockedError as exc:
    print("locked:" + exc.group)
"""


def test_unlock_and_lock_cross_processes(tether_home: Path) -> None:
    vault = Vault(Store.open(tether_home), tether_home)
    vault.create_group("prod", PASSPHRASE)
    vault.set("DB", CANARY, group="prod", passphrase=PASSPHRASE)

    def other_process() -> str:
        done = subprocess.run(
            [sys.executable, "-c", _RESOLVE_SCRIPT, str(tether_home)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert other_process() == "locked:prod"
    vault.unlock("prod", PASSPHRASE)
    assert other_process() == "value:" + CANARY
    vault.lock("prod")
    assert other_process() == "locked:prod"


def test_unlock_minutes_and_config_are_validated(tether_home: Path) -> None:
    vault = Vault(
        Store.open(tether_home), tether_home, settings=VaultSettings(unlock_minutes=2, max_unlock_minutes=10)
    )
    vault.create_group("prod", PASSPHRASE)
    vault.create_group("plain")
    for minutes in (0, 11, -1):
        with pytest.raises(UsageError, match="unlock minutes must be 1 – 10"):
            vault.unlock("prod", PASSPHRASE, minutes)
    with pytest.raises(UsageError, match="no passphrase"):
        vault.unlock("plain", PASSPHRASE)
    with pytest.raises(UsageError, match="cannot be locked"):
        vault.lock("plain")
    with pytest.raises(NotFoundError):
        vault.unlock("nope", PASSPHRASE)
    (tether_home / "config.toml").write_text("[vault]\nunlock_minutes = 30\nmax_unlock_minutes = 60\n")
    assert vault_settings(load_config(tether_home)) == VaultSettings(unlock_minutes=30, max_unlock_minutes=60)
    for bad, message in (
        ("[vault]\nunlock_minutes = 0\n", "whole number of minutes"),
        ("[vault]\nunlock_minutes = true\n", "whole number of minutes"),
        ("[vault]\nunlock_minute = 5\n", "unknown setting \\[vault\\].unlock_minute"),
        ("[vault]\nunlock_minutes = 90\nmax_unlock_minutes = 60\n", "exceeds"),
    ):
        (tether_home / "config.toml").write_text(bad)
        with pytest.raises(UsageError, match=message):
            vault_settings(load_config(tether_home))


def test_names_groups_and_values_are_checked(tether_home: Path) -> None:
    vault = _vault(tether_home)
    for name in ("", "1abc", "a b", "a.b", "x" * 65):
        with pytest.raises(UsageError, match="vault name"):
            vault.set(name, "v")
    with pytest.raises(UsageError, match="vault group"):
        vault.set("OK", "v", group="bad group")
    for value, message in (("", "empty"), ("a\0b", "NUL"), ("x" * (64 * 1024 + 1), "exceeds")):
        with pytest.raises(UsageError, match=message):
            vault.set("OK", value)
    vault.set("SHARED", "v")
    with pytest.raises(UsageError, match="already exists in group 'default'"):
        vault.set("SHARED", "w", group="other")
    with pytest.raises(UsageError, match="empty"):
        vault.create_group("g", "   ")
    vault.create_group("g", PASSPHRASE)
    with pytest.raises(UsageError, match="already exists"):
        vault.create_group("g")
    with pytest.raises(NotFoundError, match="no vault secret named 'MISSING'"):
        vault.resolve("MISSING")
    with pytest.raises(NotFoundError):
        vault.remove("MISSING")
    assert vault.remove("SHARED") == "default"
    with pytest.raises(NotFoundError):
        vault.resolve("SHARED")
    vault.set("IN_G", "v", group="g", passphrase=PASSPHRASE)
    with pytest.raises(RefusedError, match="still holds 1 secret"):
        vault.delete_group("g")
    vault.remove("IN_G")  # removing from a locked group reveals nothing, so it is allowed
    vault.delete_group("g")
    assert [g.name for g in vault.list().groups] == ["default"]


def test_a_sealed_value_moved_to_another_name_fails_authentication(tether_home: Path) -> None:
    vault = _vault(tether_home)
    vault.set("A", "alpha")
    vault.set("B", "bravo")
    vault.store.execute(
        "UPDATE vault_items SET sealed = (SELECT sealed FROM vault_items WHERE name = 'A') WHERE name = 'B'"
    )
    assert vault.resolve("A") == "alpha"
    with pytest.raises(VaultKeyError, match="fails authentication"):
        vault.resolve("B")


def test_key_file_rules(tether_home: Path) -> None:
    vault = _vault(tether_home)
    vault.set("A", "alpha")
    key = tether_home / "vault.key"
    key.chmod(0o644)
    with pytest.raises(VaultKeyError, match="chmod 600"):
        _vault(tether_home).resolve("A")
    key.chmod(0o600)
    saved = key.read_bytes()
    key.unlink()
    with pytest.raises(VaultKeyError, match="missing but the vault already holds"):
        _vault(tether_home).resolve("A")
    key.write_bytes(b"garbage\n")
    key.chmod(0o600)
    with pytest.raises(VaultKeyError, match="not a tether vault key"):
        _vault(tether_home).resolve("A")
    key.unlink()
    create_master_key(key)  # a different key: the old group key no longer opens
    with pytest.raises(VaultKeyError, match="does not open"):
        _vault(tether_home).resolve("A")
    key.unlink()
    key.write_bytes(saved)
    key.chmod(0o600)
    assert _vault(tether_home).resolve("A") == "alpha"


def test_racing_key_creation_yields_one_key(tmp_path: Path) -> None:
    path = tmp_path / "vault.key"
    keys: list[bytes] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        keys.append(create_master_key(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and read_master_key(path) == keys[0]
    assert sorted(os.listdir(tmp_path)) == ["vault.key"], "temporary files must not be left behind"


_SET_SCRIPT = """
import sys
from pathlib import Path
from tether.store.db import Store
from tether.store.vault import Vault
home = Path(sys.argv[1])
store = Store.open(home)
vault = Vault(store, home)
if sys.argv[2] == "set":
    vault.set(sys.argv[3], sys.argv[4])
elif sys.argv[2] == "unlock":
    vault.unlock(sys.argv[3], sys.argv[4])
else:
    vault.lock(sys.argv[3])
store.close()
"""


def _in_another_process(home: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SET_SCRIPT, str(home), *args], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr


def test_readable_values_follow_every_change_although_they_are_kept(tether_home: Path) -> None:
    """readable_values() is kept between calls (it runs on every tool call); any write by any
    process, and the end of an unlock, must still show in the very next answer."""
    clock = Clock(time.time())  # the other process unlocks by the real clock
    vault = _vault(tether_home, clock)
    assert vault.readable_values() == {}
    assert vault.readable_values() == {}  # served from what was kept
    _in_another_process(tether_home, "set", "API_TOKEN", CANARY)
    assert vault.readable_values() == {"API_TOKEN": CANARY}
    vault.set("OTHER", "second-value-1234")  # this process's own write
    assert vault.readable_values() == {"API_TOKEN": CANARY, "OTHER": "second-value-1234"}
    vault.create_group("prod", PASSPHRASE)
    vault.set("DB", "db-secret-5678", group="prod", passphrase=PASSPHRASE)
    assert "DB" not in vault.readable_values()
    _in_another_process(tether_home, "unlock", "prod", PASSPHRASE)
    assert vault.readable_values()["DB"] == "db-secret-5678"
    until = vault.group_info("prod").unlocked_until_ms
    assert until is not None
    clock.now = until / 1000  # the unlock has just run out: nothing was written, time passed
    assert "DB" not in vault.readable_values()
    _in_another_process(tether_home, "unlock", "prod", PASSPHRASE)
    assert "DB" in vault.readable_values()
    _in_another_process(tether_home, "lock", "prod")
    assert "DB" not in vault.readable_values()
    vault.remove("API_TOKEN")
    assert "API_TOKEN" not in vault.readable_values()


def test_readable_values_are_kept_across_other_writes_and_counted_by_the_database(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tool call writes its run and read position: those writes must not cost a re-read of
    the vault, while a write to a vault table, even one made with plain SQL by another connection
    (no Vault object involved), must show in the next answer."""
    store = Store.open(tether_home)
    vault = _vault(tether_home, store=store)
    vault.set("API_TOKEN", CANARY)
    assert vault.readable_values() == {"API_TOKEN": CANARY}
    listed: list[int] = []
    real_list = vault.list
    monkeypatch.setattr(vault, "list", lambda: listed.append(1) or real_list())
    store.execute("CREATE TABLE IF NOT EXISTS unrelated (x INTEGER)")
    for n in range(5):
        store.execute("INSERT INTO unrelated (x) VALUES (?)", (n,))
        assert vault.readable_values() == {"API_TOKEN": CANARY}
    assert listed == []
    other = Store.open(tether_home)
    other.execute("DELETE FROM vault_items WHERE name = ?", ("API_TOKEN",))
    other.close()
    assert vault.readable_values() == {}
    assert listed == [1]
    store.close()


def test_delivered_values_are_shared_sealed_deduplicated_and_dropped_with_their_shell(
    tether_home: Path,
) -> None:
    vault = _vault(tether_home)
    vault.set("API_TOKEN", CANARY)
    vault.delivered.remember("dsh-aaaaaa", {"API_TOKEN": CANARY})
    vault.set("API_TOKEN", "rotated-value")
    vault.delivered.remember("dsh-aaaaaa", {"API_TOKEN": "rotated-value"})
    vault.delivered.remember("dsh-aaaaaa", {"API_TOKEN": CANARY})  # again: the row already there
    vault.delivered.remember("dsh-bbbbbb", {"API_TOKEN": CANARY})
    vault.remove("API_TOKEN")
    other = _vault(tether_home)  # another process's view: it delivered nothing itself
    assert set(other.delivered.values()) == {("API_TOKEN", CANARY), ("API_TOKEN", "rotated-value")}
    assert other.readable_values() == {}
    assert all(CANARY.encode() not in data for data in _disk_bytes(tether_home).values())
    assert Store.open(tether_home).query("SELECT COUNT(*) AS n FROM vault_delivered")[0]["n"] == 3
    vault.delivered.forget("dsh-aaaaaa")
    assert other.delivered.values() == (("API_TOKEN", CANARY),)
    vault.delivered.forget("dsh-bbbbbb")
    assert other.delivered.values() == ()


def test_a_masker_asks_the_vault_change_count_once_and_sees_every_write(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The masker is asked twice a tool call: one read of the vault's change count serves both the
    readable values and the delivered ones, and a write by another process, a value delivered to a
    shell, a group locked show in the very next masker all the same."""
    from tether.shells import SecretRedactor

    store = Store.open(tether_home)
    vault = _vault(
        tether_home, Clock(time.time()), store=store
    )  # the other process unlocks by the real clock
    redactor = SecretRedactor(lambda: vault)
    counted: list[str] = []
    store._conn().set_trace_callback(lambda sql: counted.append(sql) if "vault_changes" in sql else None)

    def masks(text: str) -> str:
        counted.clear()
        masked = redactor.masker().mask(text)
        assert len(counted) == 1, counted
        return masked

    assert masks(f"a {CANARY} b") == f"a {CANARY} b"
    _in_another_process(tether_home, "set", "API_TOKEN", CANARY)
    assert CANARY not in masks(f"a {CANARY} b")
    vault.delivered.remember("dsh-ab12cd", {"SHIPPED": "delivered-value-7781"})
    assert "delivered-value-7781" not in masks("x delivered-value-7781 y")
    vault.create_group("prod", PASSPHRASE)
    vault.set("DB", "db-secret-5678", group="prod", passphrase=PASSPHRASE)
    _in_another_process(tether_home, "unlock", "prod", PASSPHRASE)
    assert "db-secret-5678" not in masks("db-secret-5678")
    _in_another_process(tether_home, "lock", "prod")
    assert masks("db-secret-5678") == "db-secret-5678"
    assert CANARY not in masks(CANARY) and "delivered-value-7781" not in masks("delivered-value-7781")
