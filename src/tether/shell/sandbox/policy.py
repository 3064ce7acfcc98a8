"""What the bubblewrap sandbox allows: the ``[sandbox]`` settings, the permission modes, and the
per-command policy derived from them.

Invariant: a policy is built only from settings that validated completely — an unknown key, a
wrong type, a relative or missing writable root, or an unknown escalation name is a ``UsageError``
naming the key, the allowed values and the fix, so a typo never widens (or silently drops) the
confinement. An escalation is granted only when its mode is one of ``PERMISSION_MODES``, its
justification is non-blank, and the deployment lists it in ``allow_escalations``; everything else
is a ``RefusedError``.

A writable root is never ``/``, the kernel's directories, nor anything inside ``TETHER_HOME`` or a
hidden path; and a working directory the model chose is never in a system directory
(``SYSTEM_DIRECTORIES``: files there run as the user outside the sandbox — as root, a file in
``/etc/cron.d`` is a root cron job) unless it lies in a ``writable_roots`` entry, which the
deployment's owner chose. ``build_policy`` refuses such a working directory (``RefusedError``;
``allow_host_write``, which a person grants, lifts the system-directory rule), and
``SandboxSettings.from_config`` refuses a ``writable_roots`` entry no call could honour at
start-up. A working directory that is exactly ``/tmp`` is not a writable root at all: the command
runs in the sandbox's private ``/tmp``, and nothing of the host's ``/tmp`` is bound in.

Permission modes, narrow → wide (``sandbox_permissions`` on the ``bash`` tool)::

    use_default        read-only filesystem, writable working directory + writable_roots,
                       private /tmp, no network, own PID namespace            (no justification)
    allow_network      use_default + the host's network                       (justification)
    allow_host_write   use_default, but the whole filesystem is writable
                       (except the protected paths); still no network         (justification)
    require_escalated  run unconfined: no sandbox at all                      (justification)

Protected paths stay read-only in every confined mode, even inside writable roots: the user's
persistence paths (``sandbox.persistence``: start-up files, ``~/.ssh``, git's global config,
``PATH`` directories, autostart, systemd user units, cron), the control files of every git
repository under the roots (added per command from ``sandbox.repos``), and ``TETHER_HOME``
(hidden behind an empty read-only directory, so its sockets cannot be reached).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from tether.config import Config
from tether.errors import RefusedError, UsageError
from tether.process.bounds import Bounds
from tether.process.bounds import support as bounds_support
from tether.shell.sandbox.persistence import PathResolver, PersistencePath, hooks_directory, persistence_paths

PermissionMode = Literal["use_default", "allow_network", "allow_host_write", "require_escalated"]
DEFAULT_MODE: Final = "use_default"
PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = (
    "use_default",
    "allow_network",
    "allow_host_write",
    "require_escalated",
)
ESCALATIONS: Final = PERMISSION_MODES[1:]
PRIVATE_TMP: Final = "/tmp"  # an empty tmpfs in every sandbox but allow_host_write's
MODE_SUMMARIES: Final[dict[str, str]] = {
    "use_default": "read-only filesystem except the working directory and configured roots; no network",
    "allow_network": "as use_default, plus the host's network",
    "allow_host_write": "as use_default, but the whole filesystem is writable except protected paths",
    "require_escalated": "unconfined (no sandbox)",
}
# A sandbox's /tmp, /dev/shm and /run live in memory that no process owns: unbounded, one command
# could fill half the machine's RAM in each, which the OOM killer cannot take back from it.
DEFAULT_TMPFS_MB: Final = 1024
# What one confined command (a one-shot command's whole tree, or a persistent shell's) may take at
# once (``tether.process.bounds``): a fork bomb stops here, not at the machine's pid_max.
DEFAULT_MAX_PROCESSES: Final = 1024
MIN_PROCESSES: Final = 16  # bubblewrap, its init, the tracer and the shell, with room to run something
MIN_MEMORY_MB: Final = 32


@functools.cache
def default_memory_mb() -> int:
    """Half the machine's memory, in MiB (4096 where ``/proc/meminfo`` cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return max(MIN_MEMORY_MB, int(line.split()[1]) // 1024 // 2)
    except (OSError, ValueError, IndexError):
        pass
    return 4096


_KEYS: Final = {
    "writable_roots": "list of absolute directories the sandbox may write besides the working directory",
    "allow_escalations": f"list of modes granted without a person, from {', '.join(ESCALATIONS)}",
    "read_only_paths": "list of absolute paths kept read-only even inside writable roots",
    "hidden_paths": "list of absolute paths replaced by an empty read-only file or directory",
    "bwrap": "the bubblewrap executable (default: bwrap on PATH)",
    "trace": "report denials by tracing the command with strace (default true)",
    "allow_unix_sockets": "let sandboxed commands create Unix sockets, which reach every host socket "
    "outside /tmp, /run and TETHER_HOME (default false)",
    "tmpfs_size_mb": "the most each of a sandbox's own in-memory directories (/tmp, /dev/shm, /run) may "
    f"hold, in MiB (default {DEFAULT_TMPFS_MB}, at least 1)",
    "max_processes": "the most processes (and threads) one confined command or shell may have at once "
    f"(default {DEFAULT_MAX_PROCESSES}; at least {MIN_PROCESSES}, or 0 for no bound)",
    "memory_mb": "the most memory one confined command or shell may use, in MiB, its in-memory /tmp "
    f"included (default half the machine's memory; at least {MIN_MEMORY_MB}, or 0 for no bound)",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxSettings:
    """The validated ``[sandbox]`` table."""

    writable_roots: tuple[str, ...] = ()
    allow_escalations: tuple[str, ...] = ()
    read_only_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    bwrap: str = "bwrap"
    trace: bool = True
    allow_unix_sockets: bool = False
    tmpfs_size_mb: int = DEFAULT_TMPFS_MB
    max_processes: int = DEFAULT_MAX_PROCESSES
    memory_mb: int = dataclasses.field(default_factory=default_memory_mb)

    @property
    def bounds(self) -> Bounds | None:
        """What each confined command may take (``tether.process.bounds``); None: nothing."""
        if not self.max_processes and not self.memory_mb:
            return None
        return Bounds(processes=self.max_processes, memory_mb=self.memory_mb)

    def bounds_text(self) -> str:
        """The bounds as a report says them: what applies on this machine, and what does not."""
        bounds = self.bounds
        if bounds is None:
            return "processes and memory not bounded ([sandbox].max_processes and memory_mb are 0)"
        return bounds_support().describe(bounds)

    @classmethod
    def from_config(cls, config: Config) -> SandboxSettings:
        # absent: the strict defaults
        return cls.from_table(config.section("sandbox"), home=config.home)

    @classmethod
    def from_table(cls, table: dict[str, Any], *, home: Path | None = None) -> SandboxSettings:
        """The validated table; ``home`` (``TETHER_HOME``) also refuses writable roots inside it."""
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            allowed = "; ".join(f"{k} ({v})" for k, v in _KEYS.items())
            raise UsageError(
                f"config.toml: [sandbox] has unknown key {unknown[0]!r}; allowed keys: {allowed}"
            )
        roots = _paths(table, "writable_roots", must_be_dir=True)
        escalations = _strings(table, "allow_escalations")
        for name in escalations:
            if name not in ESCALATIONS:
                raise UsageError(
                    f"config.toml: [sandbox].allow_escalations has {name!r}; "
                    f"allowed: {', '.join(ESCALATIONS)}"
                )
        bwrap = table.get("bwrap", "bwrap")
        if not isinstance(bwrap, str) or not bwrap.strip():
            raise UsageError(
                "config.toml: [sandbox].bwrap must be a non-empty string (a path or a name on PATH)"
            )
        trace = table.get("trace", True)
        unix_sockets = table.get("allow_unix_sockets", False)
        for key, value in (("trace", trace), ("allow_unix_sockets", unix_sockets)):
            if not isinstance(value, bool):
                raise UsageError(f"config.toml: [sandbox].{key} must be true or false")
        tmpfs_mb = table.get("tmpfs_size_mb", DEFAULT_TMPFS_MB)
        if isinstance(tmpfs_mb, bool) or not isinstance(tmpfs_mb, int) or tmpfs_mb < 1:
            raise UsageError(
                f"config.toml: [sandbox].tmpfs_size_mb must be a whole number of MiB, at least 1 "
                f"(got {tmpfs_mb!r}; default {DEFAULT_TMPFS_MB}): {_KEYS['tmpfs_size_mb']}"
            )
        max_processes = _bound(table, "max_processes", DEFAULT_MAX_PROCESSES, MIN_PROCESSES, "")
        memory_mb = _bound(table, "memory_mb", None, MIN_MEMORY_MB, " of MiB")
        hidden = _paths(table, "hidden_paths", must_be_dir=False)
        tether_home = os.path.realpath(home) if home is not None else None
        for root in roots:
            # An entry no command could ever write would refuse every call, one by one, later.
            refusal = root_refusal(
                os.path.realpath(root),
                tether_home=tether_home,
                hidden=tuple(os.path.realpath(h) for h in hidden),
                host_write=False,
                configured=True,
            )
            if refusal is not None:
                raise UsageError(
                    f"config.toml: [sandbox].writable_roots entry {root!r} can never be writable: "
                    f"{refusal[0]}; remove it (a command that must write there asks for "
                    'sandbox_permissions="allow_host_write", which a person approves)'
                )
        return cls(
            writable_roots=roots,
            allow_escalations=escalations,
            read_only_paths=_paths(table, "read_only_paths", must_be_dir=False),
            hidden_paths=hidden,
            bwrap=bwrap.strip(),
            trace=trace,
            allow_unix_sockets=unix_sockets,
            tmpfs_size_mb=tmpfs_mb,
            max_processes=DEFAULT_MAX_PROCESSES if max_processes is None else max_processes,
            memory_mb=default_memory_mb() if memory_mb is None else memory_mb,
        )

    def bwrap_path(self) -> str:
        """The bubblewrap executable, or a ``UsageError`` saying how to install or configure it."""
        found = shutil.which(self.bwrap)
        if found is None:
            raise UsageError(
                f"the sandbox needs bubblewrap, but {self.bwrap!r} cannot be found; install it "
                "(Debian/Ubuntu: apt-get install bubblewrap, or `make system`) or set [sandbox].bwrap "
                "in config.toml — tether never falls back to running unconfined"
            )
        return found

    def check_escalation(self, mode: str | None, justification: str | None) -> PermissionMode:
        """The mode a command runs under; refuses what this deployment does not grant unattended."""
        wanted = (mode or "").strip() or DEFAULT_MODE
        if wanted not in PERMISSION_MODES:
            raise UsageError(
                f"sandbox_permissions {wanted!r} is not a sandbox mode; "
                f"allowed: {', '.join(PERMISSION_MODES)}"
            )
        if wanted == DEFAULT_MODE:
            return DEFAULT_MODE
        if not (justification or "").strip():
            raise UsageError(
                f"sandbox_permissions {wanted!r} widens the sandbox and needs a non-empty justification "
                "saying why this command needs it"
            )
        if wanted not in self.allow_escalations:
            granted = ", ".join(self.allow_escalations) or "none"
            raise RefusedError(
                f"sandbox_permissions {wanted!r} needs a person's approval in this deployment "
                f"(granted without approval: {granted}; [sandbox].allow_escalations in config.toml); "
                "run the command within the default sandbox, or ask the user to allow it"
            )
        return _as_mode(wanted)


def _as_mode(name: str) -> PermissionMode:
    for mode in PERMISSION_MODES:
        if mode == name:
            return mode
    raise UsageError(f"unknown sandbox mode {name!r}")


def _bound(table: dict[str, Any], key: str, default: int | None, floor: int, unit: str) -> int | None:
    """A bound's value: absent → ``default``; else 0 (off) or a whole number ≥ ``floor``."""
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or (value != 0 and value < floor):
        raise UsageError(
            f"config.toml: [sandbox].{key} must be a whole number{unit}, at least {floor}, or 0 "
            f"for no bound (got {value!r}): {_KEYS[key]}"
        )
    return value


def _strings(table: dict[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise UsageError(f"config.toml: [sandbox].{key} must be a list of non-empty strings ({_KEYS[key]})")
    return tuple(v.strip() for v in value)


def _paths(table: dict[str, Any], key: str, *, must_be_dir: bool) -> tuple[str, ...]:
    paths: list[str] = []
    for raw in _strings(table, key):
        path = os.path.expanduser(raw)
        if not os.path.isabs(path):
            raise UsageError(
                f"config.toml: [sandbox].{key} entry {raw!r} is not an absolute path; write it in full"
            )
        if must_be_dir and not os.path.isdir(path):
            raise UsageError(
                f"config.toml: [sandbox].{key} entry {raw!r} is not an existing directory; "
                "create it or remove it"
            )
        paths.append(os.path.normpath(path))
    return tuple(paths)


class RepoSnapshotLike(Protocol):
    """What the policy needs of a repository snapshot (``sandbox.repos.RepoSnapshot``)."""

    def read_only(self) -> tuple[str, ...]: ...

    def links(self) -> tuple[tuple[str, str], ...]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxPolicy:
    """What one confined command may do (``require_escalated`` never produces one)."""

    mode: PermissionMode
    cwd: str
    writable_roots: tuple[str, ...]  # real paths; the working directory first (unless PRIVATE_TMP)
    network: bool
    host_write: bool
    protected: tuple[str, ...]  # real paths kept read-only (existing or not)
    hidden: tuple[str, ...]
    tether_home: str
    protected_dirs: frozenset[str] = frozenset()  # protected paths that stand in as directories
    standins: frozenset[str] = frozenset()  # absent protected paths that get a placeholder
    unix_sockets: bool = False
    tmpfs_bytes: int = DEFAULT_TMPFS_MB << 20  # the size of each of the sandbox's own tmpfs
    links: tuple[tuple[str, str], ...] = ()  # symlinks on the way to protected paths → their targets

    def may_stand_in(self, path: str) -> bool:
        """Whether an absent protected path is guarded by a placeholder while the command runs."""
        return path in self.standins

    def writable(self, path: str) -> bool:
        """Whether a write to ``path`` (a real path) is inside the writable area and unprotected."""
        if self.is_protected(path) or _under(path, self.tether_home):
            return False
        if self.host_write:
            return not path.startswith(("/proc/", "/sys/", "/dev/")) or _under(path, "/dev/shm")
        own = _under(path, "/tmp") or _under(path, "/dev/shm")  # the sandbox's own tmpfs
        return own or any(_under(path, root) for root in self.writable_roots)

    def is_protected(self, path: str) -> bool:
        return any(_under(path, p) for p in (*self.protected, *self.hidden))

    def summary(self) -> str:
        roots = ", ".join(self.writable_roots) or f"the private {PRIVATE_TMP} only"
        writes = "everywhere except protected paths" if self.host_write else roots
        return f"{self.mode}: writable {writes}; network {'allowed' if self.network else 'off'}"


def with_repositories(policy: SandboxPolicy, repos: RepoSnapshotLike) -> SandboxPolicy:
    """``policy`` with the control files of the repositories under its roots protected too.

    A control file that is a symlink (``.git/hooks -> ../.githooks``, a shared hooks directory) is
    bound read-only where it points — a mount cannot sit on a link — so the link itself is only an
    entry of the git directory: ``rm .git/hooks; mkdir .git/hooks`` made a hooks directory that
    existed "before" and was therefore never neutralised. Such links are kept with the persistence
    paths' (``links``), and put back after the command like theirs (``sandbox.links``)."""
    extra = [p for p in repos.read_only() if p not in policy.protected]
    known = {path for path, _ in policy.links}
    links = [link for link in repos.links() if link[0] not in known]
    return dataclasses.replace(policy, protected=(*policy.protected, *extra), links=(*policy.links, *links))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# Directories whose files the host runs or obeys — programs, libraries, configuration, cron jobs,
# services, boot files — so a confined command must never write them (root's writes there would run
# as root outside later), plus the kernel's interfaces, whose host view would cover the sandbox's.
SYSTEM_DIRECTORIES: Final = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/opt", "/srv",
    "/run", "/var", "/snap", "/proc", "/sys", "/dev",
)  # fmt: skip
_KERNEL_DIRECTORIES: Final = ("/proc", "/sys", "/dev")
_SYSTEM_EXCEPTIONS: Final = ("/var/tmp",)  # world-writable scratch space, like /tmp


def system_directory(real: str) -> str | None:
    """The system directory (``SYSTEM_DIRECTORIES``) the real path ``real`` is or lies under, by its
    real path too (``/bin`` is ``/usr/bin`` on a merged-/usr system); ``None`` for anything else."""
    if any(_under(real, os.path.realpath(exception)) for exception in _SYSTEM_EXCEPTIONS):
        return None
    for system in SYSTEM_DIRECTORIES:
        if _under(real, system) or _under(real, os.path.realpath(system)):
            return system
    return None


def root_refusal(
    root: str,
    *,
    tether_home: str | None,
    hidden: tuple[str, ...],
    host_write: bool,
    configured: bool = False,
) -> tuple[str, bool] | None:
    """Why the real path ``root`` cannot be a writable root, and whether ``allow_host_write`` would
    lift that; ``None`` when it can be one. ``configured``: the deployment named it (or a directory
    holding it) in ``writable_roots``, its owner's decision, so a system directory other than the
    kernel's is allowed (a CI user's workspace under ``/var/lib``, a project under ``/srv``); a
    working directory the model chose is not."""
    concealer = next((h for h in (tether_home, *hidden) if h is not None and _under(root, h)), None)
    if concealer is not None:
        what = "TETHER_HOME" if concealer == tether_home else "[sandbox].hidden_paths"
        return f"it is inside {concealer}, which the sandbox hides ({what})", False
    if host_write:
        return None
    if root == "/":
        return "it is the root directory: the whole host would become writable", True
    system = system_directory(root)
    if system is None or (configured and system not in _KERNEL_DIRECTORIES):
        return None
    exact = root in (system, os.path.realpath(system))
    where = "the system directory" if exact else "inside the system directory"
    if system in _KERNEL_DIRECTORIES:
        why = "binding it writable would cover the sandbox's own /proc, /sys or /dev with the host's"
    else:
        why = (
            "files there run as the user outside the sandbox (programs, libraries, configuration, "
            "cron jobs, services)"
        )
    return f"it is {where} {system}: {why}", True


def _refuse_inside_protected(root: str, protected: dict[str, PersistencePath]) -> list[str]:
    """A writable root below a protected directory, or in a git directory's ``hooks``, is refused.

    A protected path is bound read-only only where it lies inside a writable root; one *above* the
    root was left to the read-only filesystem, which the root's own writable bind covers — so a
    working directory of ``~/.config/fish/conf.d`` or ``~/.config/systemd/user/default.target.wants``
    wrote what the user's next login runs, and one of ``repo/.git/hooks`` (whose git directory the
    repository scan, which looks below the roots, never sees) wrote a hook the person's next ``git
    commit`` ran unconfined. A root that *is* a protected path stays allowed: it is bound read-only
    whole. Returns the hooks directories (``core.hooksPath``) of work trees *above* the root that
    lie below it: the scan below the root never sees their git directory, so they are protected
    here."""
    # PATH directories excepted: only their own entries are looked up, never a directory below.
    looked_up = {
        os.path.realpath(e) for e in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(e)
    }
    inside = next((p for p in protected if root != p and _under(root, p) and p not in looked_up), None)
    if inside is not None:
        raise RefusedError(
            f"the sandbox cannot make {root!r} writable: it lies inside {inside}, which the sandbox keeps "
            "read-only in every mode (what is written there runs unconfined later: start-up files, "
            "services, PATH programs); run the command in a project directory"
        )
    below: list[str] = []
    current = root
    while current != "/":
        parent = os.path.dirname(current)
        hooks = current if os.path.basename(current) == "hooks" and _is_git_directory(parent) else None
        # A work tree's own hooks directory (core.hooksPath, husky's .husky/_) around the root.
        configured = hooks_directory(f"{current}/.git") if os.path.isdir(f"{current}/.git") else None
        if configured is not None and current != root and _under(configured, root) and configured != root:
            below.append(configured)
        hooks = hooks or (configured if configured is not None and _under(root, configured) else None)
        if hooks is not None:
            raise RefusedError(
                f"the sandbox cannot make {root!r} writable: it lies in {hooks}, a directory of git hooks, "
                "which an unconfined git runs; run the command in the repository's work tree (the "
                "sandbox protects its hooks and configuration)"
            )
        current = parent
    return below


def _is_git_directory(path: str) -> bool:
    """Whether ``path`` holds what git needs to take it for a git directory."""
    return os.path.isfile(os.path.join(path, "HEAD")) and os.path.isdir(os.path.join(path, "objects"))


def build_policy(settings: SandboxSettings, *, mode: PermissionMode, cwd: str, home: Path) -> SandboxPolicy:
    """The policy for one command in ``cwd``; refuses writable roots the sandbox cannot honour."""
    real_cwd = os.path.realpath(cwd)
    tether_home = os.path.realpath(home)
    hidden = tuple(os.path.realpath(p) for p in settings.hidden_paths)
    # /tmp is the sandbox's own (a private tmpfs): a command started in /tmp runs there, and
    # nothing of the host's /tmp is bound in — its files, or another tmux server's socket, which
    # allow_unix_sockets would make reachable.
    private_tmp = real_cwd == PRIVATE_TMP and mode != "allow_host_write"
    configured = (os.path.realpath(r) for r in settings.writable_roots)
    roots = tuple(dict.fromkeys([*([] if private_tmp else [real_cwd]), *configured]))
    granted = tuple(os.path.realpath(r) for r in settings.writable_roots)
    for root in roots:
        refusal = root_refusal(
            root,
            tether_home=tether_home,
            hidden=hidden,
            host_write=mode == "allow_host_write",
            configured=any(_under(root, g) for g in granted),
        )
        if refusal is not None:
            reason, host_write_helps = refusal
            fix = "run the command in a project directory"
            if host_write_helps:
                fix += ', or ask for sandbox_permissions="allow_host_write", which a person approves'
            raise RefusedError(
                f"the sandbox cannot make {root!r} writable (working directory or "
                f"[sandbox].writable_roots): {reason}; {fix}"
            )
    user_home = os.path.realpath(os.path.expanduser("~"))
    persistence = persistence_paths(
        user_home=user_home,
        path_env=os.environ.get("PATH", ""),
        xdg_config_home=os.environ.get("XDG_CONFIG_HOME"),
    )
    # Real paths: a protected name that is a symlink (dotfiles managers) is protected where it
    # points, and the links on the way are remembered (a command could replace them).
    resolver = PathResolver()
    protected: dict[str, PersistencePath] = {}
    for item in persistence:
        protected.setdefault(resolver.resolve(item.path), item)
    for path in settings.read_only_paths:
        protected.setdefault(
            resolver.resolve(path), PersistencePath(path=path, kind="file", placeholder=True)
        )
    for root in roots:
        for hooks in _refuse_inside_protected(root, protected):
            protected.setdefault(hooks, PersistencePath(path=hooks, kind="dir", placeholder=False))
    return SandboxPolicy(
        mode=mode,
        cwd=real_cwd,
        writable_roots=roots,
        network=mode == "allow_network",
        host_write=mode == "allow_host_write",
        protected=tuple(protected),
        hidden=hidden,
        tether_home=tether_home,
        protected_dirs=frozenset(p for p, item in protected.items() if item.kind == "dir"),
        standins=frozenset(p for p, item in protected.items() if item.placeholder),
        unix_sockets=settings.allow_unix_sockets,
        tmpfs_bytes=settings.tmpfs_size_mb << 20,
        links=tuple(resolver.links.items()),
    )
