"""The secret vault: named values in groups, encrypted at rest, shared by every tether process.

Invariant: no secret value, data key or passphrase is ever written in clear — the database holds
only sealed blobs (see ``crypto``) and ``list()`` never returns a value. A passphrase group
is readable only while a *current* unlock row exists; ``lock`` deletes the row, so every process
sharing the home sees the lock on its next read, and an expired row counts as locked.

Names are one namespace across groups (a reference ``{{vault.NAME}}`` does not name its group).

Trade-off of the shared unlock (documented in docs/vault.md): while a passphrase group is
unlocked, its data key sits in the database wrapped with the master key in ``vault.key``, so
anything running as the same user can read the group until the expiry or ``lock``. When the group
is locked, only the passphrase opens it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.config import Config, ensure_home
from tether.errors import NotFoundError, RefusedError, UsageError
from tether.store.db import Store, register_schema
from tether.store.vault import crypto as vc
from tether.store.vault.delivered import DeliveredValues
from tether.store.vault.rules import (
    DEFAULT_GROUP,
    MAX_VALUE_BYTES,
    VaultGroupInfo,
    VaultItemInfo,
    VaultListing,
    VaultLockedError,
    VaultSettings,
    check_group,
    check_name,
    vault_settings,
)

register_schema(
    "vault",
    """
    CREATE TABLE IF NOT EXISTS vault_groups (
        name TEXT PRIMARY KEY,
        protected INTEGER NOT NULL,        -- 1 = passphrase group
        wrapped_key BLOB NOT NULL,         -- data key sealed by the master key or the scrypt KEK
        salt BLOB,
        scrypt_n INTEGER, scrypt_r INTEGER, scrypt_p INTEGER,
        created_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS vault_items (
        name TEXT PRIMARY KEY,
        grp TEXT NOT NULL REFERENCES vault_groups(name),
        sealed BLOB NOT NULL,              -- nonce || AES-GCM(value), AAD binds name and group
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS vault_unlocks (
        grp TEXT PRIMARY KEY REFERENCES vault_groups(name) ON DELETE CASCADE,
        wrapped_key BLOB NOT NULL,         -- data key sealed by the master key, AAD binds the expiry
        expires_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS vault_delivered (
        shell TEXT NOT NULL,               -- a shell not closed since (rows go when it closes)
        digest BLOB NOT NULL,              -- HMAC(master key, name and value): one row per value
        name TEXT NOT NULL,
        sealed BLOB NOT NULL,              -- the value sealed by the master key, AAD: shell and name
        PRIMARY KEY (shell, digest)
    );
    CREATE TABLE IF NOT EXISTS vault_changes (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        n INTEGER NOT NULL                 -- counts every write to the vault's tables (triggers)
    );
    INSERT OR IGNORE INTO vault_changes (id, n) VALUES (1, 0);
    """
    # The database counts its own vault writes, whoever makes them (any process, any version that
    # writes through SQLite): what keeps readable_values() exact between tool calls.
    + "".join(
        f"CREATE TRIGGER IF NOT EXISTS {table}_{verb.lower()}_counted AFTER {verb} ON {table} "
        "BEGIN UPDATE vault_changes SET n = n + 1 WHERE id = 1; END;\n"
        for table in ("vault_groups", "vault_items", "vault_unlocks", "vault_delivered")
        for verb in ("INSERT", "UPDATE", "DELETE")
    ),
)


_NEVER_MS = 2**62  # a readable_values() answer without a timed unlock stays valid until a write


def _item_aad(group: str, name: str) -> bytes:
    return f"tether-vault:item:{group}:{name}".encode()


def _group_aad(group: str) -> bytes:
    return f"tether-vault:group:{group}".encode()


def _unlock_aad(group: str, expires_ms: int) -> bytes:
    return f"tether-vault:unlock:{group}:{expires_ms}".encode()


class Vault:
    """The vault of one ``TETHER_HOME``; cheap to create, safe to use from several processes."""

    def __init__(
        self,
        store: Store,
        home: Path,
        *,
        settings: VaultSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.key_path = home / "vault.key"
        self.settings = settings or VaultSettings()
        self._clock = clock
        self._master: bytes | None = None
        # readable_values() of the last call: (database change stamp, valid until ms, values).
        self._readable: tuple[int, int, dict[str, str]] | None = None
        # Values delivered to live shells (``delivered``): masked by every process until the shell
        # closes, whatever happened to the item since.
        self.delivered = DeliveredValues(store, self._master_key, self._changes)

    @classmethod
    def open(cls, config: Config) -> Vault:
        ensure_home(config.home)
        return cls(Store.open(config.home), config.home, settings=vault_settings(config))

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- keys ---------------------------------------------------------------------------------

    def _master_key(self) -> bytes:
        if self._master is None:
            key = vc.read_master_key(self.key_path)
            if key is None:
                if self.store.query("SELECT 1 FROM vault_groups LIMIT 1"):
                    raise vc.VaultKeyError(
                        f"{self.key_path} is missing but the vault already holds encrypted groups; restore "
                        "the file from a backup (a new key cannot read the old values)"
                    )
                key = vc.create_master_key(self.key_path)
            self._master = key
        return self._master

    def _group_row(self, group: str) -> Any:
        rows = self.store.query("SELECT * FROM vault_groups WHERE name = ?", (group,))
        if not rows:
            raise NotFoundError(f"vault group {group!r} does not exist; see `tether vault list`")
        return rows[0]

    def _data_key(self, group: str, *, name: str = "") -> bytes:
        """The group's data key, or ``VaultLockedError`` for a passphrase group not unlocked now."""
        row = self._group_row(group)
        if not row["protected"]:
            key = vc.open_sealed(self._master_key(), row["wrapped_key"], _group_aad(group))
        else:
            unlocks = self.store.query(
                "SELECT wrapped_key, expires_ms FROM vault_unlocks WHERE grp = ? AND expires_ms > ?",
                (group, self._now_ms()),
            )
            if not unlocks:
                raise VaultLockedError(name=name or f"(group {group})", group=group)
            unlock = unlocks[0]
            key = vc.open_sealed(
                self._master_key(), unlock["wrapped_key"], _unlock_aad(group, unlock["expires_ms"])
            )
        if key is None:
            raise vc.VaultKeyError(
                f"the key of vault group {group!r} does not open with {self.key_path}; the key file was "
                "replaced or the database altered — restore the matching vault.key"
            )
        return key

    def _passphrase_key(self, row: Any, passphrase: str) -> bytes:
        params = vc.ScryptParams(n=row["scrypt_n"], r=row["scrypt_r"], p=row["scrypt_p"])
        kek = vc.derive_kek(passphrase, row["salt"], params)
        key = vc.open_sealed(kek, row["wrapped_key"], _group_aad(row["name"]))
        if key is None:
            raise vc.wrong_passphrase(row["name"])
        return key

    # -- groups -------------------------------------------------------------------------------

    def create_group(self, group: str, passphrase: str | None = None) -> VaultGroupInfo:
        """A plain group (``passphrase=None``) or a passphrase-locked one (created locked)."""
        check_group(group)
        if passphrase is not None and not passphrase.strip():
            raise UsageError("a vault group passphrase must not be empty or only whitespace")
        data_key = vc.new_key()
        master = self._master_key()
        if passphrase is None:
            wrapped, salt, params = vc.seal(master, data_key, _group_aad(group)), None, vc.ScryptParams()
        else:
            salt, params = vc.new_salt(), vc.ScryptParams()
            wrapped = vc.seal(vc.derive_kek(passphrase, salt, params), data_key, _group_aad(group))
        with self.store.transaction() as conn:
            if conn.execute("SELECT 1 FROM vault_groups WHERE name = ?", (group,)).fetchone():
                raise UsageError(f"vault group {group!r} already exists; pick another name")
            conn.execute(
                "INSERT INTO vault_groups VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    group,
                    int(passphrase is not None),
                    wrapped,
                    salt,
                    params.n,
                    params.r,
                    params.p,
                    self._now_ms(),
                ),
            )
        return self.group_info(group)

    def delete_group(self, group: str) -> None:
        """Remove an empty group (a group with secrets is refused, naming how many)."""
        self._group_row(group)
        with self.store.transaction() as conn:
            count = conn.execute("SELECT COUNT(*) FROM vault_items WHERE grp = ?", (group,)).fetchone()[0]
            if count:
                raise RefusedError(
                    f"vault group {group!r} still holds {count} secret(s); remove them first "
                    "(`tether vault rm NAME`)"
                )
            conn.execute("DELETE FROM vault_groups WHERE name = ?", (group,))

    def unlock(self, group: str, passphrase: str, minutes: int | None = None) -> VaultGroupInfo:
        """Unlock a passphrase group for ``minutes`` (default from config) in every process."""
        limit = self.settings.max_unlock_minutes
        minutes = self.settings.unlock_minutes if minutes is None else minutes
        if isinstance(minutes, bool) or not 1 <= minutes <= limit:
            raise UsageError(f"unlock minutes must be 1 – {limit} (set [vault].max_unlock_minutes to change)")
        row = self._group_row(group)
        if not row["protected"]:
            raise UsageError(f"vault group {group!r} has no passphrase; it is always unlocked")
        data_key = self._passphrase_key(row, passphrase)
        expires_ms = self._now_ms() + minutes * 60_000
        wrapped = vc.seal(self._master_key(), data_key, _unlock_aad(group, expires_ms))
        self.store.execute(
            "INSERT OR REPLACE INTO vault_unlocks (grp, wrapped_key, expires_ms) VALUES (?, ?, ?)",
            (group, wrapped, expires_ms),
        )
        return self.group_info(group)

    def lock(self, group: str) -> bool:
        """Lock at once; ``True`` if the group was unlocked. A plain group cannot be locked."""
        row = self._group_row(group)
        if not row["protected"]:
            raise UsageError(
                f"vault group {group!r} has no passphrase, so it cannot be locked; keep secrets that need "
                "a human's approval in a passphrase group (`tether vault group create GROUP`)"
            )
        with self.store.transaction() as conn:
            live = conn.execute(
                "SELECT 1 FROM vault_unlocks WHERE grp = ? AND expires_ms > ?", (group, self._now_ms())
            ).fetchone()
            conn.execute("DELETE FROM vault_unlocks WHERE grp = ?", (group,))
        return live is not None

    def group_info(self, group: str) -> VaultGroupInfo:
        for info in self.list().groups:
            if info.name == group:
                return info
        raise NotFoundError(f"vault group {group!r} does not exist; see `tether vault list`")

    # -- items --------------------------------------------------------------------------------

    def set(
        self, name: str, value: str, *, group: str = DEFAULT_GROUP, passphrase: str | None = None
    ) -> VaultItemInfo:
        """Store (or replace) a value. Into a locked group only with its ``passphrase``.

        A missing group is created as a plain group; a name already used in another group is
        refused rather than silently moved.
        """
        check_name(name)
        check_group(group)
        raw = value.encode("utf-8")
        if not raw:
            raise UsageError(f"the value for vault secret {name!r} is empty; nothing was stored")
        if len(raw) > MAX_VALUE_BYTES:
            raise UsageError(f"the value for vault secret {name!r} exceeds {MAX_VALUE_BYTES} bytes")
        if "\0" in value:
            raise UsageError(
                f"the value for vault secret {name!r} contains a NUL byte, which a shell cannot hold"
            )
        self._check_not_elsewhere(name, group)
        if not self.store.query("SELECT 1 FROM vault_groups WHERE name = ?", (group,)):
            with contextlib.suppress(UsageError):  # a racing process created it first
                self.create_group(group)
        row = self._group_row(group)
        if row["protected"] and passphrase is not None:
            data_key = self._passphrase_key(row, passphrase)
        else:
            data_key = self._data_key(group, name=name)
        sealed = vc.seal(data_key, raw, _item_aad(group, name))
        with self.store.transaction() as conn:
            self._check_not_elsewhere(name, group)
            conn.execute(
                "INSERT OR REPLACE INTO vault_items (name, grp, sealed, updated_ms) VALUES (?, ?, ?, ?)",
                (name, group, sealed, self._now_ms()),
            )
        return VaultItemInfo(name=name, group=group, locked=False, updated_ms=self._now_ms())

    def _check_not_elsewhere(self, name: str, group: str) -> None:
        other = self.store.query("SELECT grp FROM vault_items WHERE name = ?", (name,))
        if other and other[0]["grp"] != group:
            raise UsageError(
                f"vault secret {name!r} already exists in group {other[0]['grp']!r}; remove it first "
                f"(`tether vault rm {name}`) or set it with --group {other[0]['grp']}"
            )

    def remove(self, name: str) -> str:
        """Delete a secret (also from a locked group: removing reveals nothing); returns its group."""
        rows = self.store.query("SELECT grp FROM vault_items WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(f"no vault secret named {name!r}; see `tether vault list`")
        self.store.execute("DELETE FROM vault_items WHERE name = ?", (name,))
        return str(rows[0]["grp"])

    def group_of(self, name: str) -> str:
        rows = self.store.query("SELECT grp FROM vault_items WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(f"no vault secret named {name!r}; add it with `tether vault set {name}`")
        return str(rows[0]["grp"])

    def resolve(self, name: str) -> str:
        """The value, or ``VaultLockedError`` (locked group) / ``NotFoundError`` (no such name)."""
        group = self.group_of(name)
        data_key = self._data_key(group, name=name)
        rows = self.store.query("SELECT sealed FROM vault_items WHERE name = ? AND grp = ?", (name, group))
        if not rows:  # removed between the two reads
            raise NotFoundError(f"no vault secret named {name!r}; add it with `tether vault set {name}`")
        raw = vc.open_sealed(data_key, rows[0]["sealed"], _item_aad(group, name))
        if raw is None:
            raise vc.VaultKeyError(f"vault secret {name!r} fails authentication; the database was altered")
        return raw.decode("utf-8")

    def readable_values(self, stamp: int | None = None) -> dict[str, str]:
        """Every value readable now (plain and unlocked groups), for building an output masker.

        Asked on every tool call, so the answer is kept until the vault changes (any write by any
        process to its tables: a secret set, a group unlocked or locked — counted by the database
        itself, so the runs and reads written on every call keep it) or the first unlock expires.
        ``stamp``: that count (``change_stamp``) read just before, when the caller has it.
        """
        if stamp is None:
            stamp = self._changes()
        now = self._now_ms()
        cached = self._readable
        if cached is not None and cached[0] == stamp and now < cached[1]:
            return dict(cached[2])
        listing = self.list()
        values: dict[str, str] = {}
        for item in listing.items:
            if not item.locked:
                with contextlib.suppress(VaultLockedError, NotFoundError):  # locked or removed meanwhile
                    values[item.name] = self.resolve(item.name)
        expiries = [g.unlocked_until_ms for g in listing.groups if g.unlocked_until_ms is not None]
        self._readable = (stamp, min(expiries, default=_NEVER_MS), dict(values))
        return values

    def change_stamp(self) -> int:
        """The count of writes to the vault's tables, by any process (the key of what is kept)."""
        return self._changes()

    def _changes(self) -> int:
        rows = self.store.query("SELECT n FROM vault_changes WHERE id = 1")
        return int(rows[0]["n"]) if rows else -1

    def list(self) -> VaultListing:
        now = self._now_ms()
        unlocked = {
            row["grp"]: int(row["expires_ms"])
            for row in self.store.query(
                "SELECT grp, expires_ms FROM vault_unlocks WHERE expires_ms > ?", (now,)
            )
        }
        counts = {
            row["grp"]: int(row["n"])
            for row in self.store.query("SELECT grp, COUNT(*) AS n FROM vault_items GROUP BY grp")
        }
        groups = tuple(
            VaultGroupInfo(
                name=row["name"],
                protected=bool(row["protected"]),
                locked=bool(row["protected"]) and row["name"] not in unlocked,
                unlocked_until_ms=unlocked.get(row["name"]) if row["protected"] else None,
                items=counts.get(row["name"], 0),
            )
            for row in self.store.query("SELECT name, protected FROM vault_groups ORDER BY name")
        )
        locked = {g.name for g in groups if g.locked}
        items = tuple(
            VaultItemInfo(
                name=row["name"], group=row["grp"], locked=row["grp"] in locked, updated_ms=row["updated_ms"]
            )
            for row in self.store.query("SELECT name, grp, updated_ms FROM vault_items ORDER BY name")
        )
        return VaultListing(
            groups=groups,
            items=items,
            unlock_minutes=self.settings.unlock_minutes,
            max_unlock_minutes=self.settings.max_unlock_minutes,
        )
