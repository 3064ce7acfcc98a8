"""Where tether keeps its state, and the settings a deployment may change.

Invariant: every setting has exactly one documented default here, and ``config.toml`` can only
narrow or change a *known* key — an unknown section or key is a ``UsageError`` naming the allowed
ones, so a typo never silently falls back to a default.

``TETHER_HOME`` (default ``~/.tether``) holds everything: ``tmux.sock``, ``tether.db``,
``audit/``, ``spill/``, ``logs/``, ``config.toml`` and ``token``. Pointing ``TETHER_HOME`` at a
fresh directory isolates a test or a user completely.

``[hosts.NAME]`` tables name other machines persistent shells may run on (over OpenSSH); each entry
is checked whole at load (``HostSection``), so a bad entry stops tether from starting and the
message names the host and the field.

Sections owned by a feature module (``[guard]``, ``[sandbox]``) are validated by that module from
``Config.raw``; this module only checks that the section name is known.

The settings are ``NamedTuple`` classes (immutable, compared by value, ``_replace`` for a changed copy),
not dataclasses: ``tether mcp`` loads this module before it answers ``initialize``, and
``dataclasses`` (with the ``inspect`` it imports, and a generated ``__init__`` per class) took
~30 ms of that answer's ~120 ms on a 2-core VM. ``tests/test_cli_light.py`` keeps it out.

No ``from __future__ import annotations`` here: with it every field's annotation is a string, and
``NamedTuple`` turns each into a ``typing.ForwardRef``, compiling it — ~50 compilations, most of
this module's import (~1.3 ms without them against ~9.8 ms with, in one loaded minute; every
``tether`` command loads it). So the annotations below are evaluated, and name only what is
defined above them.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from tether.errors import UsageError
from tether.home import ensure_home as ensure_home  # one rule for every door
from tether.home import open_regular
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


# The one-shot executors ``[shell].provider`` may name (``tether.shell.providers`` builds them).
PROVIDERS: tuple[str, ...] = ("bash", "pwsh", "sandbox")


class ShellSection(NamedTuple):
    """``[shell]``: one-shot executor defaults (spec 000 LocalShellOptions)."""

    provider: str = "bash"  # one of PROVIDERS
    cwd: str = ""  # empty = the process's working directory
    timeout_ms: int = 120_000
    max_timeout_ms: int = 600_000
    max_output_bytes: int = 64_000
    max_spill_bytes: int = 64 * MIB
    grace_ms: int = 3_000
    executable: str = ""  # empty = resolve bash / pwsh


class EnvSection(NamedTuple):
    """``[env]``: credential scrubbing of every child environment."""

    scrub_patterns: tuple[str, ...] = DEFAULT_SCRUB_PATTERNS
    extra_scrub_patterns: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()  # names exempt from scrubbing


class JobsSection(NamedTuple):
    """``[jobs]``: the background job table."""

    max_live: int = 16
    max_finished: int = 64


class ToolsSection(NamedTuple):
    """``[tools]``: ShellToolOptions of spec 000."""

    enable_run_in_background: bool = True
    promote_on_timeout: bool = True


class SessionsSection(NamedTuple):
    """``[sessions]``: persistent shells (spec 003)."""

    max_sessions: int = 8
    idle_close: bool = False  # the idle master switch
    idle_close_minutes: int = 60
    log_max_bytes: int = 256 * MIB  # per-shell full-output log cap
    # A closed shell's log, timing samples, snapshots and rows go this many days after its close
    # (``shells.retention``); 0 keeps them for ever.
    keep_closed_days: int = 30
    result_max_bytes: int = 64_000  # the text of one task's result (at least 1024)
    user_busy_seconds: float = 3.0
    default_cols: int = 120
    default_rows: int = 32
    shell: str = "bash"


class ApprovalsSection(NamedTuple):
    """``[approvals]``: questions put to a person (an escalation, a guard block with ``ask``)."""

    timeout_s: int = 120  # how long a question waits for an answer; then it is refused


class ServerSection(NamedTuple):
    """``[server]``: ``tether serve``."""

    host: str = "127.0.0.1"
    port: int = 8765


class CliSection(NamedTuple):
    """``[cli]``: the command line's tools process (``tether.cli.door``)."""

    # How long it waits for the next command after the last one left; 0: it ends with each command.
    door_idle_seconds: float = 300.0


_TYPED: dict[str, type[Any]] = {
    "shell": ShellSection,
    "env": EnvSection,
    "jobs": JobsSection,
    "tools": ToolsSection,
    "sessions": SessionsSection,
    "server": ServerSection,
    "approvals": ApprovalsSection,
    "cli": CliSection,
}
# Integer settings with a floor above zero: the value each names is a count that cannot be empty
# (a job table with no room would refuse every job, so its owner refuses to be built with it).
_AT_LEAST: dict[tuple[str, str], tuple[int, str]] = {
    ("jobs", "max_live"): (1, "the number of background jobs that may run at once"),
    # 0 is no "no deadline": every one-shot command would time out before it started.
    ("shell", "timeout_ms"): (1, "a one-shot command's default deadline in ms (0 is not 'none')"),
    ("shell", "max_timeout_ms"): (1, "the longest deadline a call may ask for, in ms (0 is not 'none')"),
    # A log capped below a screenful of output loses what a wait or a read is about to look at.
    ("sessions", "log_max_bytes"): (
        MIB,
        "the disk a shell's full-output log may use, in bytes (1 MiB or more)",
    ),
    ("sessions", "result_max_bytes"): (1024, "the text of one task's result, in bytes"),
    # The smallest terminal a shell opens with (shell_open's own cols and rows: 20 and 5).
    ("sessions", "default_cols"): (20, "the columns of a shell opened without a size"),
    ("sessions", "default_rows"): (5, "the rows of a shell opened without a size"),
}
# Integer settings with a ceiling: the sizes shell_open and shell_manage's resize accept (a shell
# opened without a size must be one a call could have asked for).
_AT_MOST: dict[tuple[str, str], int] = {
    ("sessions", "default_cols"): 1000,
    ("sessions", "default_rows"): 500,
}
# Sections validated by the module that owns them.
_OWNED_ELSEWHERE = ("guard", "sandbox", "vault")

_HOST_NAME_RE = r"[a-z0-9][a-z0-9_-]{0,31}"
_SSH_OPTION_RE = r"([A-Za-z][A-Za-z0-9]*)\s*(?:=|\s)\s*(\S.*)"
# ssh options tether sets itself (connection sharing, no prompts, strict host keys) or takes from
# its own keys; a host entry may not override them.
_OWNED_SSH_OPTIONS = {
    "batchmode": "tether always sets BatchMode=yes (no prompt may block a call)",
    "stricthostkeychecking": "tether always checks host keys against known_hosts (StrictHostKeyChecking=yes)",
    "controlmaster": "tether shares one connection per host itself",
    "controlpath": "tether keeps the shared connection's socket under $TETHER_HOME/ssh",
    "controlpersist": "tether keeps the shared connection open itself",
    "connecttimeout": "use the host's connect_timeout key",
    "port": "use the host's port key",
    "identityfile": "use the host's identity key",
    "remotecommand": "tether chooses what runs on the host",
    "requesttty": "tether chooses whether a terminal is requested",
    "sessiontype": "tether chooses what runs on the host",
    "stdinnull": "tether talks to the host over standard input",
    "forkafterauthentication": "tether talks to the host over standard input",
}


class HostSection(NamedTuple):
    """``[hosts.NAME]``: a machine reached with OpenSSH. ``ssh`` is any destination ``ssh`` accepts
    (``~/.ssh/config`` applies); ``tether_home`` is the state directory on that machine."""

    name: str
    ssh: str
    port: int | None = None
    identity: str | None = None  # a private key file (``~`` expanded)
    options: tuple[str, ...] = ()  # extra ``-o`` settings, as ``Name=value``
    tether_home: str = "~/.tether"
    connect_timeout: int = 10  # seconds


_HOST_KEYS = ("ssh", "port", "identity", "options", "tether_home", "connect_timeout")


def _host_section(name: str, table: object) -> HostSection:
    import re  # here, not at the top: only a config with [hosts] needs it

    where = f"config.toml: [hosts.{name}]"
    if not re.fullmatch(_HOST_NAME_RE, name):
        raise UsageError(
            f"{where}: a host name is 1-32 characters of a-z, 0-9, '-' and '_', starting with a letter "
            "or digit; rename the table"
        )
    if name == "local":
        raise UsageError(f"{where}: 'local' is the implicit host (this machine); give the table another name")
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table of settings ({', '.join(_HOST_KEYS)})")
    unknown = sorted(set(table) - set(_HOST_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown setting {unknown[0]}; allowed: {', '.join(_HOST_KEYS)}")
    ssh = table.get("ssh")
    if ssh is None:
        raise UsageError(
            f"{where}.ssh is required: the destination ssh connects to (user@host or a Host alias)"
        )
    if (
        not isinstance(ssh, str)
        or not ssh
        or len(ssh) > 255
        or ssh.startswith("-")
        or not ssh.isprintable()
        or any(c.isspace() for c in ssh)
    ):
        raise UsageError(
            f"{where}.ssh must be one ssh destination such as 'user@build.example.com' or a Host alias "
            f"(no spaces, not starting with '-'); got {ssh!r}"
        )
    port = table.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise UsageError(f"{where}.port must be an integer from 1 to 65535; got {port!r}")
    identity = table.get("identity")
    if identity is not None:
        if not isinstance(identity, str) or not identity.strip():
            raise UsageError(f"{where}.identity must be the path of a private key file; got {identity!r}")
        identity = str(Path(identity).expanduser())
        if not Path(identity).is_file():
            raise UsageError(f"{where}.identity: no key file at {identity}; give the path of an existing key")
    return HostSection(
        name=name,
        ssh=ssh,
        port=port,
        identity=identity,
        options=_host_options(where, table.get("options", [])),
        tether_home=_host_home(where, table.get("tether_home", "~/.tether")),
        connect_timeout=_host_timeout(where, table.get("connect_timeout", 10)),
    )


def _host_options(where: str, options: object) -> tuple[str, ...]:
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise UsageError(f'{where}.options must be a list of ssh settings such as ["ServerAliveInterval=15"]')
    import re

    out = []
    for i, option in enumerate(options):
        m = re.fullmatch(_SSH_OPTION_RE, option.strip())
        if m is None or not option.isprintable():
            raise UsageError(
                f"{where}.options[{i}]: {option!r} is not an ssh setting; write Name=value "
                '(as after ssh -o, e.g. "ProxyJump=bastion")'
            )
        owned = _OWNED_SSH_OPTIONS.get(m.group(1).lower())
        if owned is not None:
            raise UsageError(f"{where}.options[{i}]: {m.group(1)} cannot be set here: {owned}")
        out.append(f"{m.group(1)}={m.group(2).strip()}")
    return tuple(out)


def _host_home(where: str, home: object) -> str:
    if (
        not isinstance(home, str)
        or not home.isprintable()
        or not (home.startswith(("/", "~/")) or home == "~")
    ):
        raise UsageError(
            f"{where}.tether_home must be an absolute path or one under ~ on that machine "
            f"(default '~/.tether'); got {home!r}"
        )
    return home.rstrip("/") or "/"


def _host_timeout(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 300:
        raise UsageError(
            f"{where}.connect_timeout must be a whole number of seconds from 1 to 300; got {value!r}"
        )
    return value


def _hosts(table: object) -> tuple[HostSection, ...]:
    if not isinstance(table, dict):
        raise UsageError("config.toml: [hosts] must hold one table per host: [hosts.NAME] with ssh = '…'")
    return tuple(_host_section(name, entry) for name, entry in table.items())


class Config(NamedTuple):
    home: Path
    shell: ShellSection = ShellSection()
    env: EnvSection = EnvSection()
    jobs: JobsSection = JobsSection()
    tools: ToolsSection = ToolsSection()
    sessions: SessionsSection = SessionsSection()
    server: ServerSection = ServerSection()
    cli: CliSection = CliSection()
    approvals: ApprovalsSection = ApprovalsSection()
    hosts: tuple[HostSection, ...] = ()  # the machines besides this one (``local``)
    raw: Mapping[str, Any] = MappingProxyType({})  # config.toml as read (read-only)

    def section(self, name: str) -> dict[str, Any]:
        """The raw table of a section owned by a feature module (empty when absent)."""
        value = self.raw.get(name, {})
        return value if isinstance(value, dict) else {}


def _build_section(name: str, cls: type[Any], table: object) -> Any:
    if not isinstance(table, dict):
        raise UsageError(f"config.toml: [{name}] must be a table of settings")
    allowed = cls._field_defaults
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in allowed:
            raise UsageError(
                f"config.toml: unknown setting [{name}].{key}; allowed: {', '.join(sorted(allowed))}"
            )
        default = allowed[key]
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
            floor = _AT_LEAST.get((name, key))
            if floor is not None and value < floor[0]:
                raise UsageError(
                    f"config.toml: [{name}].{key} = {value} is too small; it is {floor[1]}, "
                    f"at least {floor[0]} (default {default})"
                )
            ceiling = _AT_MOST.get((name, key))
            if ceiling is not None and value > ceiling:
                raise UsageError(
                    f"config.toml: [{name}].{key} = {value} is too large; it is at most {ceiling}, "
                    f"the most a call may ask for (default {default})"
                )
        elif isinstance(default, float):
            # TOML has nan and inf: neither is a length of time (`0 <= nan` is false too).
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise UsageError(
                    f"config.toml: [{name}].{key} must be a non-negative number (a finite one; nan "
                    f"and inf are not allowed); got {value!r}"
                )
            value = float(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise UsageError(f"config.toml: [{name}].{key} must be a string")
        values[key] = value
    return cls(**values)


def _read_text(path: Path) -> str:
    """The file's text; a FIFO in its place is refused, never waited on."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
        return handle.read().decode("utf-8")


def load_config(home: Path | None = None) -> Config:
    """Read ``$TETHER_HOME/config.toml`` (absent = all defaults)."""
    home = resolve_home() if home is None else home
    path = home / "config.toml"
    raw: dict[str, Any] = {}
    if path.exists():
        import tomllib  # here, not at the top: `tether mcp` reaches this module before it needs TOML

        try:
            raw = tomllib.loads(_read_text(path))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"config.toml at {path} cannot be read: {exc} (TOML is UTF-8 text)") from exc
    known = (*_TYPED, *_OWNED_ELSEWHERE, "hosts")
    for name in raw:
        if name not in known:
            raise UsageError(f"config.toml: unknown section [{name}]; allowed: {', '.join(sorted(known))}")
    sections = {name: _build_section(name, cls, raw[name]) for name, cls in _TYPED.items() if name in raw}
    provider = sections.get("shell", ShellSection()).provider
    if provider not in PROVIDERS:
        # Every door refuses to start: a mistyped "sandbox" must not run commands unconfined.
        raise UsageError(
            f"config.toml: [shell].provider = {provider!r} is not available; choose one of: "
            f"{', '.join(PROVIDERS)}"
        )
    shell = sections.get("sessions", SessionsSection()).shell
    if shell and not Path(shell).name.startswith("bash"):
        # Refused here, at every door's start, not at the first shell_open: a server that starts
        # with it would refuse every persistent shell it is asked for.
        raise UsageError(
            f"config.toml: [sessions].shell = {shell!r}; persistent shells run bash (their shell "
            "integration is bash's PS0/PS1/PROMPT_COMMAND): set it to 'bash' or a path to a bash executable"
        )
    hosts = _hosts(raw["hosts"]) if "hosts" in raw else ()
    return Config(home=home, raw=raw, hosts=hosts, **sections)
