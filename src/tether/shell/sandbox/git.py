"""Neutralising what a confined command left in git directories, before its result returns.

Invariant: after ``neutralise(before, after)`` no git directory or control file that appeared
during the command (``after`` has it, ``before`` did not) can make an unconfined ``git`` run a
program or read another configuration:

- a hook (any entry of ``hooks/`` not ending in ``.sample``) is renamed to ``NAME.disabled-by-tether``
  and loses its execute bits; a ``hooks`` that is a symlink or a file is renamed the same way;
- ``config`` and ``config.worktree`` keep only the keys ``git init``, ``git clone``, submodules and
  worktrees write (``SAFE_KEYS``): ``core.hooksPath``, ``core.fsmonitor``, ``core.sshCommand``,
  ``core.pager``, ``include.path``, ``alias.*``, ``filter.*``, ``diff.*.textconv``, ``credential.*``,
  ``url.*.insteadOf`` … are removed. The file is parsed by ``git config`` itself (so what is
  removed is what git would have obeyed) and rewritten from what survives; a file git cannot
  parse, a symlink, or one larger than ``MAX_CONFIG_BYTES`` is renamed away instead.

Control files that existed before the command were bound read-only while it ran, so they are the
user's and are never touched. Every action is a ``ShellSandboxDenial`` of kind ``git``.

Why fd-relative operations: this runs unconfined, as the user (often root), on paths a sandboxed
command chose; a concurrent command could swap a directory for a symlink to ``/etc`` between the
listing and the rename. Every directory is opened component by component with ``O_NOFOLLOW`` and
renames and writes happen relative to that fd, so nothing outside the git directory is reached.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from typing import Final

from tether.shell.sandbox.repos import RepoSnapshot
from tether.shell.types import ShellSandboxDenial

logger = logging.getLogger(__name__)

DISABLED_SUFFIX: Final = ".disabled-by-tether"
MAX_CONFIG_BYTES: Final = 1 << 20
_GIT_TIMEOUT_S: Final = 10.0
_CORE_KEYS: Final = (
    "repositoryformatversion", "filemode", "bare", "logallrefupdates", "symlinks", "ignorecase",
    "precomposeunicode", "autocrlf", "eol", "safecrlf", "sharedrepository", "sparsecheckout",
    "sparsecheckoutcone", "quotepath", "splitindex", "untrackedcache", "commitgraph", "multipackindex",
    "checkstat", "trustctime", "abbrev", "compression", "loosecompression", "bigfilethreshold",
    "protecthfs", "protectntfs", "longpaths",
)  # fmt: skip
_OTHER_KEYS: Final = (
    "user.name", "user.email", "init.defaultbranch", "pull.rebase", "pull.ff", "push.default",
    "push.autosetupremote", "fetch.prune", "fetch.prunetags", "gc.auto", "gc.autodetach",
    "index.version", "feature.manyfiles", "color.ui", "submodule.active", "submodule.recurse",
    "lfs.repositoryformatversion", "maintenance.auto", "status.showuntrackedfiles", "merge.ff",
    "rebase.autostash", "branch.autosetupmerge", "branch.autosetuprebase",
)  # fmt: skip
_REMOTE_KEYS: Final = (
    "url", "pushurl", "fetch", "push", "mirror", "tagopt", "prune", "prunetags", "promisor",
    "partialclonefilter", "skipdefaultupdate", "skipfetchall",
)  # fmt: skip
_SUBMODULE_KEYS: Final = ("url", "active", "branch", "fetchrecursesubmodules", "ignore", "shallow", "update")
SAFE_KEYS: Final = frozenset(f"core.{key}" for key in _CORE_KEYS) | frozenset(_OTHER_KEYS)
SAFE_SUBSECTION_KEYS: Final[dict[str, frozenset[str]]] = {
    "remote": frozenset(_REMOTE_KEYS),
    "branch": frozenset(("remote", "merge", "rebase", "pushremote", "description")),
    "submodule": frozenset(_SUBMODULE_KEYS),
}
_SUBMODULE_UPDATE: Final = frozenset({"checkout", "rebase", "merge", "none"})
_RUNS_A_PROGRAM_URL: Final = ("ext::", "fd::")


def appeared(before: RepoSnapshot, after: RepoSnapshot) -> bool:
    """Whether ``after`` has a git directory or control file ``before`` did not (cheap, no I/O)."""
    for path, state in after.gitdirs.items():
        old = before.gitdirs.get(path)
        if state.ident is None:
            continue
        if old is None or old.ident != state.ident:
            return True
        if any(ident is not None and old.control.get(name) is None for name, ident in state.control.items()):
            return True
    return False


def neutralise(before: RepoSnapshot, after: RepoSnapshot) -> tuple[ShellSandboxDenial, ...]:
    """Disable hooks and strip configuration that appeared between the two snapshots."""
    denials: list[ShellSandboxDenial] = []
    for path, state in after.gitdirs.items():
        if state.ident is None:
            continue
        old = before.gitdirs.get(path)
        fresh = old is None or old.ident != state.ident
        for name, ident in state.control.items():
            if ident is None or (not fresh and old is not None and old.control.get(name) is not None):
                continue
            try:
                denials.extend(_neutralise_control(path, name))
            except OSError as exc:
                # Gone or swapped meanwhile (ELOOP: a symlink now stands where a directory was).
                logger.warning("sandbox: could not neutralise %s/%s: %s", path, name, exc)
                detail = f"could not be checked ({exc.strerror or exc}); inspect it before running git there"
                denials.append(ShellSandboxDenial(kind="git", target=os.path.join(path, name), detail=detail))
    return tuple(denials)


@contextlib.contextmanager
def directory_fd(path: str) -> Iterator[int]:
    """An fd of ``path`` opened one component at a time, never through a symlink."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.strip("/").split("/"):
            if part:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = inner
        yield fd
    finally:
        os.close(fd)


def _neutralise_control(gitdir: str, name: str) -> list[ShellSandboxDenial]:
    with directory_fd(gitdir) as dirfd:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
        if name == "hooks" and stat.S_ISDIR(mode):
            return _disable_hooks(gitdir, dirfd)
        if name == "hooks" or not stat.S_ISREG(mode):
            moved = move_aside(dirfd, name)
            what = "hooks" if name == "hooks" else "not a regular file"
            return [_denial(gitdir, name, f"{what}: renamed to {moved}")]
        return _sanitise_config(gitdir, dirfd, name)


def _denial(gitdir: str, name: str, detail: str) -> ShellSandboxDenial:
    return ShellSandboxDenial(kind="git", target=os.path.join(gitdir, name), detail=detail)


def move_aside(dirfd: int, name: str) -> str:
    """Rename ``name`` out of git's way and drop its execute bits; returns the new name."""
    target = name + DISABLED_SUFFIX
    counter = 1
    while _exists(dirfd, target):
        counter += 1
        target = f"{name}{DISABLED_SUFFIX}.{counter}"
    os.rename(name, target, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    with contextlib.suppress(OSError):
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o111)
        finally:
            os.close(fd)
    return target


def _exists(dirfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _disable_hooks(gitdir: str, gitfd: int) -> list[ShellSandboxDenial]:
    denials: list[ShellSandboxDenial] = []
    hooks = os.open("hooks", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=gitfd)
    try:
        with os.scandir(hooks) as entries:
            names = [entry.name for entry in entries]
        for name in sorted(names):
            if name.endswith(".sample") or DISABLED_SUFFIX in name:
                continue  # git never runs these
            moved = move_aside(hooks, name)
            denials.append(_denial(gitdir, f"hooks/{name}", f"hook disabled: renamed to {moved}"))
    finally:
        os.close(hooks)
    return denials


def _sanitise_config(gitdir: str, dirfd: int, name: str) -> list[ShellSandboxDenial]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        content = os.read(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    entries = None if len(content) > MAX_CONFIG_BYTES else parse_config(content)
    if entries is None:
        moved = move_aside(dirfd, name)
        return [_denial(gitdir, name, f"configuration git cannot check safely: renamed to {moved}")]
    removed = [key for key, value in entries if not safe_entry(key, value)]
    if not removed:
        return []
    _rewrite(dirfd, name, render_config([(k, v) for k, v in entries if safe_entry(k, v)]))
    keys = ", ".join(dict.fromkeys(removed))
    return [_denial(gitdir, name, f"configuration removed (git would have obeyed it unconfined): {keys}")]


def parse_config(content: bytes) -> list[tuple[str, str | None]] | None:
    """``(key, value)`` pairs exactly as git reads them (None value: a bare boolean key), or None
    when git is missing or rejects the file."""
    git = shutil.which("git")
    if git is None:
        return None
    env = {
        "PATH": os.defpath,
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LC_ALL": "C",
    }
    try:
        done = subprocess.run(
            [git, "config", "--no-includes", "--file", "-", "--list", "--null"],
            input=content,
            capture_output=True,
            env=env,
            cwd="/",
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    pairs: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0"):
        if not item:
            continue
        key, newline, value = item.decode("utf-8", "surrogateescape").partition("\n")
        pairs.append((key, value if newline else None))
    return pairs


def _split(key: str) -> tuple[str, str | None, str]:
    section, _, rest = key.partition(".")
    sub, _, name = rest.rpartition(".")
    return section.lower(), (sub or None), name.lower()


def safe_entry(key: str, value: str | None) -> bool:
    section, sub, name = _split(key)
    if sub is None:
        return section == "extensions" or f"{section}.{name}" in SAFE_KEYS
    if name not in SAFE_SUBSECTION_KEYS.get(section, frozenset()):
        return False
    if section == "remote" and name in ("url", "pushurl"):
        return not (value or "").strip().lower().startswith(_RUNS_A_PROGRAM_URL)
    if section == "submodule" and name == "update":
        return (value or "").strip() in _SUBMODULE_UPDATE
    return True


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def render_config(entries: list[tuple[str, str | None]]) -> bytes:
    """A config file holding exactly ``entries`` (grouped by section, in first-seen order)."""
    groups: dict[tuple[str, str | None], list[str]] = {}
    for key, value in entries:
        section, sub, name = _split(key)
        groups.setdefault((section, sub), []).append(
            f"\t{name} = {_quote(value if value is not None else 'true')}"
        )
    lines: list[str] = []
    for (section, sub), body in groups.items():
        header = f"[{section}]" if sub is None else f"[{section} {_quote(sub)}]"
        lines.extend([header, *body])
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") if lines else b""


def _rewrite(dirfd: int, name: str, data: bytes) -> None:
    partial = f".{name}.tether-rewrite"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=dirfd)
    fd = os.open(
        partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dirfd
    )
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(partial, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
