"""Finding every git repository under the sandbox's writable roots, cheaply, before and after a command.

Invariant: ``RepositoryIndex.snapshot()`` lists every git directory below its root as it is *now*
— nested ones, bare ones, absorbed submodules (``.git/modules/*``), linked worktrees
(``.git/worktrees/*``), the targets of ``.git`` files and symlinks and of ``commondir`` files —
each with the control files an unconfined ``git`` would obey (``config``, ``config.worktree``,
``hooks``) and their inode identity. Before a command those that exist are bound read-only;
after it, ``sandbox.git`` neutralises every git directory or control file the snapshot taken
before did not have.

A directory counts as a git directory when it is named ``.git`` (even an unfinished
``mkdir -p new/.git/hooks``: a later ``git init`` there keeps the planted hook), when it holds
``HEAD`` next to ``objects`` or ``commondir`` (bare repositories, worktree and submodule git
directories), or when a ``.git`` file or ``commondir`` points at it.

Why an index: listing a tree of 20 000 directories takes ~300 ms, and a command needs two
snapshots. The index remembers, per directory, its inode, ctime and names of interest, and a
refresh re-lists only directories whose ctime moved: creating, removing or renaming an entry
updates the parent's ctime, and ctime — unlike mtime — cannot be set by the command (only a
privileged clock change could). Two refinements keep that sound: a directory whose ctime lies
within ``CTIME_MARGIN_NS`` of the moment it was listed is re-listed again (a change in the same
clock tick leaves ctime unchanged), and directories on filesystems whose ctime cannot be trusted
to move (network and FUSE filesystems cache attributes) are re-listed every time. Symlinks are
never followed while listing, and ``TETHER_HOME`` and the hidden paths are skipped (they are
masked inside the sandbox).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tether.errors import RefusedError
from tether.process.planted import read_regular
from tether.shell.sandbox.persistence import hooks_directory
from tether.shell.sandbox.policy import SandboxPolicy

CTIME_MARGIN_NS: Final = 3_000_000_000
MAX_DIRECTORIES: Final = 500_000
SMALL_TREE: Final = 1_000
CONTROL_FILES: Final = ("config", "config.worktree", "hooks")
_MARKS: Final = frozenset({".git", "HEAD", "objects", "commondir"})
# Filesystems that update a directory's ctime on every entry change, seen by every reader at once.
_TRUSTED_FILESYSTEMS: Final = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "overlay", "bcachefs", "jfs", "ramfs"}
)
_POINTER_MAX: Final = 4096

Ident = tuple[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class GitDirState:
    """One git directory: its identity (None = absent) and that of each control file."""

    path: str
    ident: Ident | None
    control: dict[str, Ident | None]
    # Control files that are symlinks, and where they point (``.git/hooks -> ../.githooks``).
    links: dict[str, str] = field(default_factory=dict)
    # The existing directory its ``core.hooksPath`` names (husky's ``.husky/_``, a ``.githooks``
    # in the work tree): git runs the hooks there instead of ``hooks``, so it is protected alike.
    hooks_path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoSnapshot:
    """Every git directory under the roots (path → state) and the ``.git`` pointer files."""

    gitdirs: dict[str, GitDirState]
    pointers: tuple[str, ...]

    def read_only(self) -> tuple[str, ...]:
        """What to bind read-only for a command: existing control files and pointer files."""
        paths = [
            os.path.join(state.path, name)
            for state in self.gitdirs.values()
            for name, ident in state.control.items()
            if ident is not None
        ]
        hooks = [state.hooks_path for state in self.gitdirs.values() if state.hooks_path is not None]
        return tuple(dict.fromkeys([*paths, *hooks, *self.pointers]))

    def links(self) -> tuple[tuple[str, str], ...]:
        """The control files that were symlinks, with their targets: the read-only bind protects
        the target only, so the link is put back after a command that replaced it."""
        return tuple(
            (os.path.join(state.path, name), target)
            for state in self.gitdirs.values()
            for name, target in state.links.items()
        )

    def to_json(self) -> dict[str, object]:
        """A JSON value ``from_json`` turns back into this snapshot (a persistent shell keeps the
        one taken when it started, for every tether process that checks it later)."""
        return {
            "gitdirs": [
                {
                    "path": g.path,
                    "ident": g.ident,
                    "control": dict(g.control),
                    "links": dict(g.links),
                    "hooks_path": g.hooks_path,
                }
                for g in self.gitdirs.values()
            ],
            "pointers": list(self.pointers),
        }

    @classmethod
    def from_json(cls, data: object) -> RepoSnapshot:
        if not isinstance(data, dict):
            raise ValueError("a repository snapshot is a JSON object")
        gitdirs: dict[str, GitDirState] = {}
        for item in data.get("gitdirs", []):
            control = {name: _as_ident(ident) for name, ident in item["control"].items()}
            links = {str(name): str(target) for name, target in item.get("links", {}).items()}
            hooks_path = item.get("hooks_path")
            state = GitDirState(
                path=str(item["path"]),
                ident=_as_ident(item["ident"]),
                control=control,
                links=links,
                hooks_path=str(hooks_path) if hooks_path is not None else None,
            )
            gitdirs[state.path] = state
        return cls(gitdirs=gitdirs, pointers=tuple(str(p) for p in data.get("pointers", [])))


def _as_ident(value: object) -> Ident | None:
    if value is None:
        return None
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    raise ValueError(f"not an inode identity: {value!r}")


class RepositoryScanTooLarge(RefusedError):
    """A writable root holds more directories than the index will follow."""


@dataclass(slots=True)
class _Dir:
    ident: Ident
    ctime_ns: int
    listed_at_ns: int
    subdirs: tuple[str, ...]
    marks: dict[str, str]  # name of interest → "d" directory, "f" file, "l" symlink, "o" other


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISREG(mode):
        return "f"
    return "l" if stat.S_ISLNK(mode) else "o"


class _Filesystems:
    """st_dev → filesystem type, from /proc/self/mountinfo (re-read when an unknown device appears)."""

    def __init__(self) -> None:
        self._types: dict[int, str] = {}

    def trusted(self, dev: int) -> bool:
        if dev not in self._types:
            self._reload()
        return self._types.get(dev, "") in _TRUSTED_FILESYSTEMS

    def _reload(self) -> None:
        with (
            contextlib.suppress(OSError),
            open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh,
        ):
            for line in fh:
                fields = line.split()
                if " - " not in line or len(fields) < 3:
                    continue
                major, _, minor = fields[2].partition(":")
                fstype = line.split(" - ", 1)[1].split()[0]
                if major.isdigit() and minor.isdigit():
                    self._types[os.makedev(int(major), int(minor))] = fstype


class RepositoryIndex:
    """The directories under one root (a real path) and the git directories among them."""

    def __init__(self, root: str, *, excluded: frozenset[str]) -> None:
        self.root = root
        self.excluded = excluded
        self._dirs: dict[str, _Dir] = {}
        self._filesystems = _Filesystems()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """How many directories the index holds (0 before the first refresh)."""
        return len(self._dirs)

    # -- listing -------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring the index up to date with the filesystem (re-listing only what changed)."""
        with self._lock:
            dirs, lstat, margin = self._dirs, os.lstat, CTIME_MARGIN_NS
            trusted: set[int] = set()
            stack = [self.root]
            while stack:
                path = stack.pop()
                known = dirs.get(path)
                try:
                    st = lstat(path)
                except OSError:
                    self._drop(path)
                    continue
                # The hot path, one stat per directory: same inode, same ctime, listed long enough
                # after its last change, on a filesystem whose ctime can be trusted.
                if (
                    known is not None
                    and st.st_ino == known.ident[1]
                    and st.st_ctime_ns == known.ctime_ns
                    and known.ctime_ns < known.listed_at_ns - margin
                    and (st.st_dev in trusted or self._trust(st.st_dev, known, trusted))
                ):
                    subdirs = known.subdirs
                else:
                    subdirs = self._relist(path, st, known)
                if subdirs:
                    prefix = path.rstrip("/") + "/"
                    stack.extend(prefix + name for name in subdirs)
                if len(dirs) > MAX_DIRECTORIES:
                    dirs.clear()
                    raise RepositoryScanTooLarge(
                        f"{self.root} holds more than {MAX_DIRECTORIES} directories, too many to check for "
                        "git repositories a command could plant hooks in; run the command in a project "
                        "directory (workdir) instead of a whole home or system tree"
                    )

    def _trust(self, dev: int, known: _Dir, trusted: set[int]) -> bool:
        if dev != known.ident[0] or not self._filesystems.trusted(dev):
            return False
        trusted.add(dev)
        return True

    def _relist(self, path: str, st: os.stat_result, known: _Dir | None) -> tuple[str, ...]:
        if not stat.S_ISDIR(st.st_mode):
            self._drop(path)
            return ()
        ident = (st.st_dev, st.st_ino)
        if known is not None and known.ident != ident:
            self._drop(path)  # another directory now: nothing known below it still holds
            known = None
        subdirs = self._list(path, ident, st.st_ctime_ns)
        if known is not None:
            for gone in set(known.subdirs) - set(subdirs):
                self._drop(os.path.join(path, gone))
        return subdirs

    def _list(self, path: str, ident: Ident, ctime_ns: int) -> tuple[str, ...]:
        listed_at = time.time_ns()
        subdirs: list[str] = []
        marks: dict[str, str] = {}
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                        if entry.name in _MARKS:
                            marks[entry.name] = (
                                "d" if is_dir else _kind(entry.stat(follow_symlinks=False).st_mode)
                            )
                    except OSError:
                        continue
                    if is_dir and entry.path not in self.excluded:
                        subdirs.append(entry.name)
        except OSError:
            return ()
        record = _Dir(
            ident=ident, ctime_ns=ctime_ns, listed_at_ns=listed_at, subdirs=tuple(subdirs), marks=marks
        )
        self._dirs[path] = record
        return record.subdirs

    def _drop(self, path: str) -> None:
        stack = [path]
        while stack:
            current = stack.pop()
            gone = self._dirs.pop(current, None)
            if gone is not None:
                stack.extend(os.path.join(current, name) for name in gone.subdirs)

    # -- snapshot ------------------------------------------------------------------------------
    def snapshot(self, *, include_target: Callable[[str], bool]) -> RepoSnapshot:
        """Refresh, then describe every git directory now under the root."""
        self.refresh()
        with self._lock:
            candidates: list[str] = []
            pointers: list[str] = []
            for path, record in self._dirs.items():
                if path.endswith("/.git") or (
                    "HEAD" in record.marks and ("objects" in record.marks or "commondir" in record.marks)
                ):
                    candidates.append(path)
                kind = record.marks.get(".git")
                if kind in ("f", "l"):
                    pointer = os.path.join(path, ".git")
                    pointers.append(pointer)
                    target = _pointer_target(pointer, kind)
                    if target is not None and include_target(target):
                        candidates.append(target)
        seen: dict[str, GitDirState] = {}
        while candidates:
            gitdir = candidates.pop()
            if gitdir in seen:
                continue
            seen[gitdir] = _state(gitdir)
            common = _commondir(gitdir)
            if common is not None and include_target(common):
                candidates.append(common)
        return RepoSnapshot(gitdirs=seen, pointers=tuple(pointers))


def _ident(path: str) -> Ident | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _state(gitdir: str) -> GitDirState:
    control: dict[str, Ident | None] = {}
    links: dict[str, str] = {}
    for name in CONTROL_FILES:
        path = os.path.join(gitdir, name)
        try:
            st = os.lstat(path)
        except OSError:
            control[name] = None
            continue
        control[name] = (st.st_dev, st.st_ino)
        if stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                links[name] = os.readlink(path)
    return GitDirState(
        path=gitdir, ident=_ident(gitdir), control=control, links=links, hooks_path=hooks_directory(gitdir)
    )


def read_small(path: str) -> str | None:
    """The first 4 KiB of a regular file, never following a final symlink, never blocking on a FIFO."""
    data = read_regular(path, _POINTER_MAX)
    return None if data is None else data[:_POINTER_MAX].decode("utf-8", "replace")


def _resolve(base: str, target: str) -> str | None:
    target = target.strip()
    if not target or "\0" in target:
        return None
    try:
        return os.path.realpath(os.path.join(base, target))
    except (OSError, ValueError):
        return None


def _pointer_target(pointer: str, kind: str) -> str | None:
    """Where a ``.git`` file (``gitdir: X``) or ``.git`` symlink leads."""
    base = os.path.dirname(pointer)
    if kind == "l":
        try:
            return _resolve(base, os.readlink(pointer))
        except OSError:
            return None
    text = read_small(pointer)
    if text is None or not text.startswith("gitdir:"):
        return None
    lines = text[len("gitdir:") :].splitlines()
    return _resolve(base, lines[0]) if lines else None


def _commondir(gitdir: str) -> str | None:
    text = read_small(os.path.join(gitdir, "commondir"))
    lines = (text or "").splitlines()
    return _resolve(gitdir, lines[0]) if lines else None


def repository_roots(policy: SandboxPolicy) -> tuple[str, ...]:
    """The writable roots to search, without those inside another (each tree is listed once)."""
    roots = sorted(set(policy.writable_roots))
    return tuple(r for r in roots if not any(r != other and _under(r, other) for other in roots))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class RepositoryGuard:
    """The repository indexes of one process: one per writable root (and masked set), kept warm
    between commands so a snapshot costs a ``stat`` per directory, not a listing."""

    def __init__(self) -> None:
        self._indexes: dict[tuple[str, frozenset[str]], RepositoryIndex] = {}
        self._lock = threading.Lock()

    def _index(self, root: str, excluded: frozenset[str]) -> RepositoryIndex:
        with self._lock:
            key = (root, excluded)
            if key not in self._indexes:
                self._indexes[key] = RepositoryIndex(root, excluded=excluded)
            return self._indexes[key]

    def small(self, policy: SandboxPolicy, *, limit: int = SMALL_TREE) -> bool:
        """Whether every root of ``policy`` is indexed already and holds at most ``limit``
        directories: refreshing it costs a few milliseconds, less than a thread hop on a busy
        machine, so the caller may snapshot on the event loop."""
        excluded = frozenset([policy.tether_home, *policy.hidden])
        with self._lock:
            indexes = [self._indexes.get((root, excluded)) for root in repository_roots(policy)]
        return all(index is not None and 0 < index.size <= limit for index in indexes)

    def snapshot(self, policy: SandboxPolicy) -> RepoSnapshot:
        """Every git directory the command could write, as it is now (blocking)."""
        excluded = frozenset([policy.tether_home, *policy.hidden])
        gitdirs: dict[str, GitDirState] = {}
        pointers: list[str] = []
        for root in repository_roots(policy):
            snap = self._index(root, excluded).snapshot(include_target=policy.writable)
            gitdirs.update(snap.gitdirs)
            pointers.extend(snap.pointers)
        return RepoSnapshot(gitdirs=gitdirs, pointers=tuple(dict.fromkeys(pointers)))
