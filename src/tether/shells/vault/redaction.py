"""The masker every text bound for a model, a notification or the audit log passes through.

Invariant: ``SecretRedactor.masker()`` masks every value the vault can read now, every value any
tether process delivered to a shell not closed since (``Vault.delivered``, in the database), *and*
every value this process delivered earlier to any shell (kept in memory: a value stays in whatever
a command kept — a file, a variable, scrollback — after its group is locked again, the item is
rotated or removed, or the shell is closed). A name delivered with two values (rotated between
two runs) has both masked: neither overwrites the other. Values in memory never leave it: nothing
here writes them anywhere (the vault seals what it keeps).

What this process keeps of delivered values is one entry per distinct (name, value), whatever
shell it went to: which shell got a value does not change what must be masked, and a server that
opens shells for weeks, each handed the same `{{vault.NAME}}`, must not keep one entry per shell
(it kept one per shell ever given a value, and walked them all at every masked call).

The compiled masker is cached by the set of values, so an unchanged vault costs one small query
per masker asked for and no regex compilation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from tether.shells.vault.mask import SecretMasker
from tether.store.vault import Vault


class SecretRedactor:
    """Vault values plus delivered values → one ``SecretMasker``."""

    def __init__(self, vault: Callable[[], Vault | None]) -> None:
        self._vault = vault
        self._delivered: dict[tuple[str, str], None] = {}  # (name, value), in the order first delivered
        self._lock = threading.Lock()
        self._cache: tuple[frozenset[tuple[str, str]], SecretMasker] | None = None

    def remember(self, shell_id: str, values: Mapping[str, str]) -> None:
        """``values`` (name → value) were delivered to ``shell_id``: mask them from now on, in
        every text, whichever shell it comes from."""
        if values:
            with self._lock:
                self._delivered.update(dict.fromkeys(values.items()))

    def held(self) -> int:
        """How many delivered (name, value) pairs this process keeps."""
        with self._lock:
            return len(self._delivered)

    def _values(self) -> list[tuple[str, str]]:
        with self._lock:
            pairs = list(self._delivered)
        vault = self._vault()
        if vault is not None:
            pairs.extend(masked_values(vault))
        return pairs

    def masker(self) -> SecretMasker:
        values = self._values()
        key = frozenset(values)
        with self._lock:
            cached = self._cache
            if cached is not None and cached[0] == key:
                return cached[1]
        masker = SecretMasker(values)
        with self._lock:
            self._cache = (key, masker)
        return masker

    def mask(self, text: str) -> str:
        return self.masker().mask(text)


def masked_values(vault: Vault) -> list[tuple[str, str]]:
    """(name, value) of what ``vault`` can read now plus what was delivered to live shells.

    A ``VaultKeyError`` (``vault.key`` missing, damaged or too widely readable) propagates: the
    caller fails closed rather than show what it could no longer mask. The vault's change count is
    read once for both answers (each is kept only while that count stays as read before it).
    """
    stamp = vault.change_stamp()
    return [*vault.readable_values(stamp).items(), *vault.delivered.values(stamp)]
