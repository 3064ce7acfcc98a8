"""Values delivered to shells, remembered by every tether process until the shell is closed.

Invariant: a value tether delivered to a shell (``{{vault.NAME}}`` in a command) stays in the
masker of *every* tether process sharing the home until that shell is closed or reaped — also
after the item is rotated or removed, after its passphrase group locks again, and after the
process that delivered it is gone (a restarted ``tether mcp`` keeping its shells, the panel of
``tether serve`` reading a shell an agent's process ran). The shell's scrollback, its full log and
anything its commands kept still hold the old value; only a masker that knows it can hide it.

At rest each row holds the value sealed with the master key (AES-GCM, AAD naming the shell and the
item) and an HMAC of the value under the same key (so one value delivered many times is one row,
and the row reveals nothing without ``vault.key``). Exposure: while a shell lives, a value
delivered to it is as readable by the same OS user as a plain group's (``vault.key`` opens it) —
which the shell's own memory and log already are; rows are deleted when the shell is closed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

from tether.store.db import Store
from tether.store.vault import crypto as vc


def _aad(shell_id: str, name: str) -> bytes:
    return f"tether-vault:delivered:{shell_id}:{name}".encode()


def _digest(master: bytes, name: str, value: str) -> bytes:
    return hmac.new(master, f"{name}\0{value}".encode(), hashlib.sha256).digest()


class DeliveredValues:
    """The ``vault_delivered`` table (declared with the vault's tables, counted by its triggers)."""

    def __init__(self, store: Store, master_key: Callable[[], bytes], changes: Callable[[], int]) -> None:
        self._store = store
        self._master_key = master_key
        self._changes = changes
        self._cache: tuple[int, tuple[tuple[str, str], ...]] | None = None

    def remember(self, shell_id: str, values: Mapping[str, str]) -> None:
        """``values`` (name → value, as delivered) reached ``shell_id``."""
        if not values:
            return
        master = self._master_key()
        with self._store.transaction() as conn:
            for name, value in values.items():
                # OR IGNORE: a value delivered again is the row already there (and no trigger
                # fires, so every process's cached answer stays valid).
                conn.execute(
                    "INSERT OR IGNORE INTO vault_delivered (shell, digest, name, sealed) VALUES (?, ?, ?, ?)",
                    (
                        shell_id,
                        _digest(master, name, value),
                        name,
                        vc.seal(master, value.encode("utf-8"), _aad(shell_id, name)),
                    ),
                )

    def values(self, stamp: int | None = None) -> tuple[tuple[str, str], ...]:
        """(name, value) of every value delivered to a shell not closed since; a name may come
        with several values (rotated between deliveries). A row that ``vault.key`` does not open
        raises ``VaultKeyError``: a value that cannot be known cannot be masked. ``stamp``: the
        vault's change count (``Vault.change_stamp``) read just before, when the caller has it."""
        if stamp is None:
            stamp = self._changes()
        cached = self._cache
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = self._store.query("SELECT shell, name, sealed FROM vault_delivered ORDER BY rowid")
        found: dict[tuple[str, str], None] = {}
        if rows:
            master = self._master_key()
            for row in rows:
                raw = vc.open_sealed(master, row["sealed"], _aad(row["shell"], row["name"]))
                if raw is None:
                    # Sealed under another key (vault.key replaced) or altered: the value it hides
                    # may be in that shell's output, and nothing can mask it. Fail closed.
                    raise vc.VaultKeyError(
                        f"the value of {row['name']!r} delivered to shell {row['shell']} does not open "
                        "with vault.key (the key was replaced, or tether.db altered); restore vault.key "
                        f"from a backup, or close shell {row['shell']}"
                    )
                found[(row["name"], raw.decode("utf-8"))] = None
        answer = tuple(found)
        self._cache = (stamp, answer)
        return answer

    def forget(self, shell_id: str) -> None:
        """The shell is closed: its delivered values are no longer kept."""
        self._store.execute("DELETE FROM vault_delivered WHERE shell = ?", (shell_id,))
