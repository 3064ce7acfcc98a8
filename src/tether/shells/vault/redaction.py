"""The masker every text bound for a model, a notification or the audit log passes through.

Invariant: ``SecretRedactor.masker()`` masks every value the vault can read now *and* every value
this process delivered earlier to any shell (kept in memory per shell: a value stays in whatever a
command kept — a file, a variable, scrollback — after its group is locked again or the item is
removed). Values never leave memory: nothing here writes them anywhere.

The compiled masker is cached by the set of values, so an unchanged vault costs one small query
per call and no regex compilation.
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
        self._delivered: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._cache: tuple[frozenset[tuple[str, str]], SecretMasker] | None = None

    def remember(self, shell_id: str, values: Mapping[str, str]) -> None:
        """``values`` (name → value) were delivered to ``shell_id``: mask them from now on."""
        if values:
            with self._lock:
                self._delivered.setdefault(shell_id, {}).update(values)

    def delivered(self, shell_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._delivered.get(shell_id, {}))

    def _values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        with self._lock:
            for per_shell in self._delivered.values():
                values.update(per_shell)
        vault = self._vault()
        if vault is not None:
            values.update(vault.readable_values())
        return values

    def masker(self) -> SecretMasker:
        values = self._values()
        key = frozenset(values.items())
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
