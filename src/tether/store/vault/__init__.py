"""tether.store.vault — the secret vault: named values in groups, encrypted at rest, shared by every
tether process using one ``TETHER_HOME``.

Invariant: no secret value, data key or passphrase is ever written in clear — the database holds
only ``nonce || AES-GCM ciphertext`` blobs sealed with associated data that names what each blob
is (so a blob moved to another row fails authentication), and a listing never carries a value. A
passphrase group is readable only while a *current* unlock row exists; locking deletes the row, so
every process sharing the home sees the lock on its next read. A vault name, a group and
``[vault]`` in config.toml follow one set of rules, so what one front door accepts every other
accepts too. Each module states the part it owns (``vault``: the tables and ``Vault``; ``crypto``:
the master key file, key wrapping and scrypt; ``rules``: names, groups, settings, listings).

The face::

    Vault                   the vault of one home: groups, unlocks, set / resolve / list
    VaultSettings,          ``[vault]`` in config.toml, and its validation
      vault_settings
    VaultListing            what ``vault-list`` shows: names, groups and lock state, never a value
    VaultLockedError        a value's passphrase group is not unlocked right now
    VaultKeyError           ``vault.key`` is missing, damaged or too widely readable
    DEFAULT_GROUP, NAME_RE  the group a secret goes to unless told; the shape of a vault name

``Vault`` and ``VaultKeyError`` are loaded on first use: they bring ``cryptography`` and the
database (sqlite3), which a caller that needs only the rules never loaded.
"""

from typing import TYPE_CHECKING

from tether.store.vault.rules import (
    DEFAULT_GROUP,
    NAME_RE,
    VaultListing,
    VaultLockedError,
    VaultSettings,
    vault_settings,
)

if TYPE_CHECKING:
    from tether.store.vault.crypto import VaultKeyError
    from tether.store.vault.vault import Vault
else:
    # Outside the type checker's view, so that it still refuses a name the face does not have.
    def __getattr__(name: str) -> object:
        """The deferred names (PEP 562): the store and the cryptography are imported on first use."""
        if name == "Vault":
            from tether.store.vault import vault

            value = vault.Vault
        elif name == "VaultKeyError":
            from tether.store.vault import crypto

            value = crypto.VaultKeyError
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


__all__ = [
    "DEFAULT_GROUP",
    "NAME_RE",
    "Vault",
    "VaultKeyError",
    "VaultListing",
    "VaultLockedError",
    "VaultSettings",
    "vault_settings",
]
