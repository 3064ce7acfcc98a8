"""The shell-env registry: which ``TETHER_*`` variables every shell execution receives.

Invariant: the env surface of an execution = the built-in keys + every contributor's output,
merged in contributor-name order; a contributor can only ever produce keys it declared, and no two
contributors (or a contributor and a built-in) declare the same key. The request's explicit
``env`` is merged by the executor *after* this, so it always wins.

Built-ins (reserved; a contributor declaring one is rejected):

* ``TETHER_HOME``: ``$TETHER_HOME`` if set, else ``~/.tether`` (``tether.home.home_text``);
* ``TETHER_SHELL``: ``"1"``;
* ``TETHER_SESSION_ID``: the agent session, only when the execution belongs to one;
* ``TETHER_PROFILE`` / ``TETHER_PROFILE_DIR``: only while a launcher has published a profile
  context (headless, no profile: neither is set).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.home import home_text
from tether.shell.firstuse import first_use

# Defined in ``tether.shell.late_types`` (what a plugin or a listing builds; a command runs on
# ``ShellEnvContext`` alone) and named here too, loaded on first use.
_LATE = frozenset({"ProfileContext", "ShellEnvContributor", "ShellEnvVariable"})

if TYPE_CHECKING:
    from tether.shell.late_types import ProfileContext as ProfileContext
    from tether.shell.late_types import ShellEnvContributor as ShellEnvContributor
    from tether.shell.late_types import ShellEnvVariable as ShellEnvVariable
else:  # outside the type checker's view, so that it still refuses a name this module does not have
    __getattr__ = first_use(__name__, {"tether.shell.late_types": _LATE})


RESERVED_KEYS: tuple[str, ...] = (
    "TETHER_HOME",
    "TETHER_PROFILE",
    "TETHER_PROFILE_DIR",
    "TETHER_SESSION_ID",
    "TETHER_SHELL",
)
_BUILTIN_DESCRIPTIONS: Mapping[str, str] = {
    "TETHER_HOME": "tether's state directory ($TETHER_HOME, else ~/.tether)",
    "TETHER_PROFILE": "name of the profile the launcher published (absent when headless)",
    "TETHER_PROFILE_DIR": "directory of the published profile (absent when headless)",
    "TETHER_SESSION_ID": "id of the agent session running the command (absent outside a session)",
    "TETHER_SHELL": '"1" in every shell tether runs',
}
_KEY_SHAPE = re.compile(r"^[A-Z][A-Z0-9_]*$")


class ShellEnvError(TetherError):
    """A contributor broke a registry rule (a programming error in the plugin, not user input)."""

    code = "SHELL_ENV_INVALID"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellEnvContext:
    """What a contributor may look at when producing values for one execution."""

    command: str
    cwd: str
    session_id: str | None = None


class ShellEnvRegistry:
    """Built-in keys plus registered contributors; ``collect`` produces one execution's variables."""

    def __init__(self, *, home: Path | None = None, profile: ProfileContext | None = None) -> None:
        self._home = home
        self._profile = profile
        self._contributors: dict[str, ShellEnvContributor] = {}

    def publish_profile(self, profile: ProfileContext | None) -> None:
        """A launcher publishes (or withdraws, with None) the profile context."""
        self._profile = profile

    def register(self, contributor: ShellEnvContributor) -> Callable[[], None]:
        """Add a contributor after checking every rule; returns a function that removes it."""
        name = contributor.name
        if not name.strip():
            raise ShellEnvError("shell-env contributor: name must be non-empty")
        if name in self._contributors:
            raise ShellEnvError(f"shell-env contributor {name!r} is already registered; names are unique")
        if not contributor.variables:
            raise ShellEnvError(f"shell-env contributor {name!r} declares no variables")
        owners = {key: other.name for other in self._contributors.values() for key in other.variables}
        for key, description in contributor.variables.items():
            if key in RESERVED_KEYS:
                raise ShellEnvError(
                    f"shell-env contributor {name!r}: {key} is a reserved built-in key "
                    f"({', '.join(RESERVED_KEYS)})"
                )
            if not key.startswith("TETHER_") or not _KEY_SHAPE.match(key):
                raise ShellEnvError(
                    f"shell-env contributor {name!r}: key {key!r} must start with TETHER_ and match "
                    "^[A-Z][A-Z0-9_]*$"
                )
            if not description.strip():
                raise ShellEnvError(
                    f"shell-env contributor {name!r}: key {key} needs a non-empty description"
                )
            if key in owners:
                raise ShellEnvError(
                    f"shell-env contributor {name!r}: key {key} is already declared by {owners[key]!r}"
                )
        self._contributors[name] = contributor

        def unregister() -> None:
            if self._contributors.get(name) is contributor:
                del self._contributors[name]

        return unregister

    def builtins(self, context: ShellEnvContext) -> dict[str, str]:
        home = str(self._home) if self._home is not None else home_text()
        values = {"TETHER_HOME": home, "TETHER_SHELL": "1"}
        if context.session_id:
            values["TETHER_SESSION_ID"] = context.session_id
        if self._profile is not None:
            values["TETHER_PROFILE"] = self._profile.name
            values["TETHER_PROFILE_DIR"] = self._profile.directory
        return values

    def collect(self, context: ShellEnvContext) -> dict[str, str]:
        """Built-ins, then each contributor's values in name order."""
        values = self.builtins(context)
        for name in sorted(self._contributors):
            contributor = self._contributors[name]
            produced = contributor.resolve(context)
            undeclared = sorted(set(produced) - set(contributor.variables))
            if undeclared:
                raise ShellEnvError(
                    f"shell-env contributor {name!r} produced undeclared keys {', '.join(undeclared)}; "
                    f"it declares {', '.join(sorted(contributor.variables))}"
                )
            values.update(produced)
        return values

    def list(self) -> list[ShellEnvVariable]:
        """Every declared variable (built-ins and contributors), in key order."""
        from tether.shell.late_types import ShellEnvVariable

        rows = [
            ShellEnvVariable(key=k, description=d, source="built-in")
            for k, d in _BUILTIN_DESCRIPTIONS.items()
        ]
        rows += [
            ShellEnvVariable(key=key, description=description, source=c.name)
            for c in self._contributors.values()
            for key, description in c.variables.items()
        ]
        return sorted(rows, key=lambda row: row.key)
