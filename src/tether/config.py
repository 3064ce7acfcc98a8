"""Where tether keeps its state, and the settings a deployment may change.

Invariant: every setting has exactly one documented default here, and ``config.toml`` can only
narrow or change a *known* key — an unknown section or key is a ``UsageError`` naming the allowed
ones, so a typo never silently falls back to a default.

``TETHER_HOME`` (default ``~/.tether``) holds everything: ``tmux.sock``, ``tether.db``,
``audit/``, ``spill/``, ``logs/``, ``config.toml`` and ``token``. Pointing ``TETHER_HOME`` at a
fresh directory isolates a test or a user completely.

Sections owned by a feature module (``[guard]``, ``[sandbox]``) are validated by that module from
``Config.raw``; this module only checks that the section name is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.home import ensure_home as ensure_home  # one rule for every door
from tether.home import resolve_home as resolve_home

MIB = 1024 * 1024


# Names are matched case-insensitively with fnmatch; a value that looks like a URL carrying a
# password (scheme://user:pass@host) is dropped whatever its name.
DEFAULT_SCRUB_PATTERNS: tuple[str, ...] = (
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*_PAT",
    "*PASSPHRASE*",
    "*_PWD",
    "*_PASS",
    "*DSN*",
    "*WEBHOOK*",
    "*JWT*",
    "*BEARER*",
    "*NETRC*",
    "*SERVICE_ACCOUNT*",
    "*_AUTH",
    "*_AUTH_*",
    "*COOKIE*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PROMPT_COMMAND",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellSection:
    """``[shell]``: one-shot executor defaults (spec 000 LocalShellOptions)."""

    provider: str = "bash"  # bash | pwsh | sandbox
    cwd: str = ""  # empty = the process's working directory
    timeout_ms: int = 120_000
    max_timeout_ms: int = 600_000
    max_output_bytes: int = 64_000
    max_spill_bytes: int = 64 * MIB
    grace_ms: int = 3_000
    executable: str = ""  # empty = resolve bash / pwsh


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvSection:
    """``[env]``: credential scrubbing of every child environment."""

    scrub_patterns: tuple[str, ...] = DEFAULT_SCRUB_PATTERNS
    extra_scrub_patterns: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()  # names exempt from scrubbing


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsSection:
    """``[jobs]``: the background job table."""

    max_live: int = 16
    max_finished: int = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsSection:
    """``[tools]``: ShellToolOptions of spec 000."""

    enable_run_in_background: bool = True
    promote_on_timeout: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionsSection:
    """``[sessions]``: persistent shells (spec 003)."""

    max_sessions: int = 8
    idle_close: bool = False  # the idle master switch
    idle_close_minutes: int = 60
    log_max_bytes: int = 256 * MIB  # per-shell full-output log cap
    result_max_bytes: int = 64_000  # the text of one task's result (at least 1024)
    user_busy_seconds: float = 3.0
    default_cols: int = 120
    default_rows: int = 32
    shell: str = "bash"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSection:
    """``[server]``: ``tether serve``."""

    host: str = "127.0.0.1"
    port: int = 8765


_TYPED: dict[str, type[Any]] = {
    "shell": ShellSection,
    "env": EnvSection,
    "jobs": JobsSection,
    "tools": ToolsSection,
    "sessions": SessionsSection,
    "server": ServerSection,
}
# Sections validated by the module that owns them.
_OWNED_ELSEWHERE = ("guard", "sandbox", "vault")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    home: Path
    shell: ShellSection = field(default_factory=ShellSection)
    env: EnvSection = field(default_factory=EnvSection)
    jobs: JobsSection = field(default_factory=JobsSection)
    tools: ToolsSection = field(default_factory=ToolsSection)
    sessions: SessionsSection = field(default_factory=SessionsSection)
    server: ServerSection = field(default_factory=ServerSection)
    raw: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        """The raw table of a section owned by a feature module (empty when absent)."""
        value = self.raw.get(name, {})
        return value if isinstance(value, dict) else {}


def _build_section(name: str, cls: type[Any], table: object) -> Any:
    if not isinstance(table, dict):
        raise UsageError(f"config.toml: [{name}] must be a table of settings")
    allowed = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in allowed:
            raise UsageError(
                f"config.toml: unknown setting [{name}].{key}; allowed: {', '.join(sorted(allowed))}"
            )
        default = getattr(cls(), key)
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"config.toml: [{name}].{key} must be a list of strings")
            value = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise UsageError(f"config.toml: [{name}].{key} must be true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"config.toml: [{name}].{key} must be a non-negative integer")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise UsageError(f"config.toml: [{name}].{key} must be a non-negative number")
            value = float(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise UsageError(f"config.toml: [{name}].{key} must be a string")
        values[key] = value
    return cls(**values)


def load_config(home: Path | None = None) -> Config:
    """Read ``$TETHER_HOME/config.toml`` (absent = all defaults)."""
    home = resolve_home() if home is None else home
    path = home / "config.toml"
    raw: dict[str, Any] = {}
    if path.exists():
        import tomllib  # here, not at the top: `tether mcp` reaches this module before it needs TOML

        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"config.toml at {path} cannot be read: {exc}") from exc
    known = (*_TYPED, *_OWNED_ELSEWHERE)
    for name in raw:
        if name not in known:
            raise UsageError(f"config.toml: unknown section [{name}]; allowed: {', '.join(sorted(known))}")
    sections = {name: _build_section(name, cls, raw[name]) for name, cls in _TYPED.items() if name in raw}
    return Config(home=home, raw=raw, **sections)
