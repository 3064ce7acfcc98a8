"""What the vault allows and reports: names, groups, settings, listings and the locked error.

Invariant: these are the only rules for a vault name or group (``check_name`` / ``check_group``)
and for ``[vault]`` in config.toml (``vault_settings``); the store and every front door use them,
so a name accepted in one place is accepted everywhere. Nothing here ever holds a secret value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tether.config import Config
from tether.errors import RefusedError, UsageError

DEFAULT_GROUP = "default"
MAX_VALUE_BYTES = 64 * 1024
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
GROUP_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_MAX_MINUTES_CAP = 7 * 24 * 60


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultSettings:
    """``[vault]`` in config.toml."""

    unlock_minutes: int = 15  # default length of an unlock
    max_unlock_minutes: int = 480  # longest unlock a person may ask for


def vault_settings(config: Config) -> VaultSettings:
    """Validate ``[vault]``: unknown keys and out-of-range values are a ``UsageError``."""
    table: dict[str, Any] = config.section("vault")
    allowed = ("unlock_minutes", "max_unlock_minutes")
    values: dict[str, int] = {}
    for key, value in table.items():
        if key not in allowed:
            raise UsageError(f"config.toml: unknown setting [vault].{key}; allowed: {', '.join(allowed)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_MINUTES_CAP:
            raise UsageError(
                f"config.toml: [vault].{key} must be a whole number of minutes, 1 – {_MAX_MINUTES_CAP}"
            )
        values[key] = value
    settings = VaultSettings(**values)
    if settings.unlock_minutes > settings.max_unlock_minutes:
        raise UsageError(
            f"config.toml: [vault].unlock_minutes ({settings.unlock_minutes}) exceeds "
            f"[vault].max_unlock_minutes ({settings.max_unlock_minutes}); lower one or raise the other"
        )
    return settings


class VaultLockedError(RefusedError):
    """A value lives in a passphrase group that is not unlocked right now."""

    def __init__(self, *, name: str, group: str) -> None:
        super().__init__(
            f"vault secret {name!r} is in group {group!r}, which is locked; a person must unlock it "
            f"(`tether vault unlock {group}` or the panel) before it can be used"
        )
        self.name = name
        self.group = group


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultGroupInfo:
    name: str
    protected: bool  # passphrase group
    locked: bool  # protected and not currently unlocked
    unlocked_until_ms: int | None  # epoch ms the current unlock ends (protected groups only)
    items: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultItemInfo:
    name: str
    group: str
    locked: bool
    updated_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultListing:
    """What ``vault-list`` shows: names, groups and lock state — never a value."""

    groups: tuple[VaultGroupInfo, ...]
    items: tuple[VaultItemInfo, ...]
    # The unlock lengths a person may ask for ([vault] of config.toml), for a form to offer.
    unlock_minutes: int
    max_unlock_minutes: int


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise UsageError(
            f"vault name {name!r} is not allowed: use 1-64 letters, digits, '_' or '-', starting with a "
            "letter or '_' (e.g. GITHUB_TOKEN)"
        )
    return name


def check_group(group: str) -> str:
    if not GROUP_RE.fullmatch(group):
        raise UsageError(
            f"vault group {group!r} is not allowed: use 1-32 letters, digits, '_' or '-', starting with a "
            "letter or digit (e.g. prod)"
        )
    return group
