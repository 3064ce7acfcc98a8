"""Keeping a living confined shell's mounts where the host replaces the paths they cover.

Invariant: while a confined persistent shell lives, every protected path (read-only), hidden path
and ``TETHER_HOME`` (masked) and every directory pinned on the way to one (``sandbox.bwrap``) is
covered in its sandbox again within moments of the host *replacing* it — renaming another file over
it or re-creating it, as ``git config``, ``git push -u``, editors and dotfile managers do — or the
sandbox is ended.

Why it is needed: bubblewrap mounts over the file or directory a path names when the sandbox starts.
Linux refuses to rename over or remove a mount point in the namespace that has the mount
(``EBUSY``), but when another namespace — the host — does it, the kernel silently drops the mount
from every other namespace. Without this process a ``git config`` run by the person at the host
left the shell's ``.git/config`` writable (``core.fsmonitor`` then runs a program unconfined at the
person's next ``git status``), and an editor's save left ``~/.bashrc`` writable or a hidden file
readable, for the rest of the shell's life.

The same goes for a hidden path that did not exist when the sandbox started (kind ``hide``:
bubblewrap had nothing to mount over): once the host creates it, it is hidden as its kind asks — an
empty read-only ``tmpfs`` for a directory, ``/dev/null`` for anything else.

How: the pane's launcher (``sandbox.launch``) opens one inotify instance watching the directories
that hold those paths — for an absent one, the nearest existing directory on its way, moving down
as the directories appear — and every directory above them up to ``/`` (a directory the host swaps
for another takes the mounts below it away with the old one); so a machine out of inotify instances
refuses to start the shell rather than run it unkept. Then it forks this keeper outside the sandbox
before it execs bubblewrap. On a create or a rename onto one of the names, or on lost events, the
keeper compares each path's ``(device, inode)`` with the one it last covered; for each that changed
it enters the sandbox's namespaces (a forked child: ``setns`` needs a single thread) and mounts
again what bubblewrap mounted there — the directory bound to itself, the path bound read-only to
itself, an empty read-only ``tmpfs``, or ``/dev/null`` — and, for a replaced directory, everything
kept below it. A mount that fails (other than for a path that is gone again) ends the sandbox: a
shell without its protection does not go on. The keeper ends with bubblewrap.

Limits (docs/sandbox.md): between the host's rename and the new mount (about a millisecond) a
process of the shell that writes the path in a loop can get through; a path the host deletes and
does not put back is not covered until it appears again (by either side). A one-shot command's
keeper (``sandbox.keeping``) runs in a process of its own (``launch.py --keep``), started once the
command has run a moment, and first covers what changed since the command's mounts were planned.

This module imports only the standard library (the launcher hands it ``tether/inotify.py``): it runs
in the launcher, before bubblewrap.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import select
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Final

KINDS: Final = frozenset({"bind", "ro", "tmpfs", "null", "hide"})
_MS_RDONLY: Final = 1
_MS_REMOUNT: Final = 32
_MS_BIND: Final = 4096
_MS_NOSUID: Final = 2
_MS_NODEV: Final = 4
# statvfs flags of a mount → the mount flags a read-only remount must keep (the kernel refuses to
# clear a flag it locked in a user namespace).
_KEEP_FLAGS: Final = (
    (os.ST_NOSUID, _MS_NOSUID),
    (os.ST_NODEV, _MS_NODEV),
    (os.ST_NOEXEC, 8),
    (os.ST_NOATIME, 1024),
    (os.ST_NODIRATIME, 2048),
    (os.ST_RELATIME, 1 << 21),
)
_CLONE_NEWNS: Final = 0x00020000
_CLONE_NEWUSER: Final = 0x10000000
_SETUP_POLL_MS: Final = 10  # while a change waits for the sandbox to finish setting up
_NS_GET_USERNS: Final = 0xB701  # ioctl: a descriptor of the user namespace that owns a namespace

Ident = tuple[int, int]


def _ident(path: str) -> Ident | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Keeper:
    """Which kept mounts the host's changes in the watched directories undid (no system effects
    beyond ``lstat`` and the watches: ``due`` says what to mount again)."""

    def __init__(
        self, entries: Iterable[Sequence[str]], covered: Mapping[str, Ident | None] | None = None
    ) -> None:
        """``covered``: what each path was when bubblewrap's mounts were planned, for a keeper
        started later (a one-shot command's); by default, what it is now."""
        kept: dict[str, str] = {}
        for path, kind in entries:
            if kind not in KINDS or not os.path.isabs(path):
                raise ValueError(f"not a kept mount: {path!r} {kind!r}")
            kept[os.path.normpath(path)] = kind
        # Sorted: a directory before what lies below it (mounted again in this order).
        self.entries: list[tuple[str, str]] = sorted(kept.items())
        # A hidden path absent when the sandbox started ("hide") has nothing mounted on it yet.
        self._covered: dict[str, Ident | None] = {
            path: None if kind == "hide" else covered[path] if covered is not None else _ident(path)
            for path, kind in self.entries
        }
        self._names: dict[tuple[str, bytes], str] = {
            (os.path.dirname(path), os.fsencode(os.path.basename(path))): path for path, _ in self.entries
        }
        # (directory, name) of each directory above a kept path → the kept paths below it: one the
        # host replaces (renames a new one in) takes the mounts below it away with the old one.
        self._above: dict[tuple[str, bytes], set[str]] = {}
        for path, _ in self.entries:
            up = os.path.dirname(path)
            while up != os.path.dirname(up):
                key = (os.path.dirname(up), os.fsencode(os.path.basename(up)))
                self._above.setdefault(key, set()).add(path)
                up = os.path.dirname(up)
        self._dirs: dict[int, str] = {}
        # (directory, name) → the directories of kept paths waiting for that name to appear: a
        # hidden path absent when the shell opened may lack its parent directories too.
        self._toward: dict[tuple[str, bytes], set[str]] = {}
        self._inotify: ModuleType | None = None
        self.fd = -1

    def watch(self, inotify: ModuleType) -> None:
        """Open the inotify instance and watch every directory holding a kept path (or, while it
        does not exist, the nearest one above it), with ``inotify`` (``tether.inotify``, which the
        launcher loads from its file); ``OSError``: inotify has no instance or watch left, or a
        directory cannot be watched."""
        self._inotify = inotify
        parents = sorted({parent for parent, _ in self._names})
        self.fd = self._inotify.open_instance()
        try:
            for parent in parents:
                try:
                    self._watch_toward(parent)
                except PermissionError:
                    # A directory this user may not read cannot be watched: a hidden path absent
                    # below it is not hidden if it appears later (docs/sandbox.md, Limits).
                    kinds = dict(self.entries)
                    if any(kinds[path] != "hide" for (d, _), path in self._names.items() if d == parent):
                        raise
        except OSError:
            os.close(self.fd)
            self.fd = -1
            raise

    def _mask(self) -> int:
        assert self._inotify is not None
        return int(self._inotify.IN_CREATE | self._inotify.IN_MOVED_TO)

    def _watch_toward(self, parent: str) -> None:
        """Watch ``parent``, or the nearest existing directory above it and, there, the name that
        leads on to it (its appearance moves the watch down); and every directory above that, up
        to ``/``, where a replaced directory on the way would show (as far as this user may)."""
        assert self._inotify is not None
        path = parent
        while not os.path.isdir(path):
            up = os.path.dirname(path)
            self._toward.setdefault((up, os.fsencode(os.path.basename(path))), set()).add(parent)
            path = up
        self._dirs[self._inotify.add_watch(self.fd, path, self._mask())] = path
        while path != os.path.dirname(path):
            path = os.path.dirname(path)
            with contextlib.suppress(OSError):  # a directory we may not read: not watched there
                self._dirs[self._inotify.add_watch(self.fd, path, self._mask())] = path

    def due(self, found: set[tuple[int, bytes]], lost: bool) -> list[tuple[str, str]]:
        """The kept mounts to make again after these events (all of them checked when events were
        lost): each path the host replaced, and everything kept below a replaced directory."""
        seen = {(self._dirs.get(wd, ""), name) for wd, name in found}
        named = {self._names.get(key) for key in seen}
        # A directory on the way to an absent path appeared: watch further down, and look at what
        # is already below it (it may have been filled before the new watch was in place).
        arrived = set().union(*(self._toward.pop(key, set()) for key in seen))
        if lost:
            arrived |= set().union(*self._toward.values())
            self._toward.clear()
        # A directory above kept paths replaced: the new one and those below it are watched
        # afresh (a watch follows the old inode), and every kept path below it is looked at.
        moved = (
            {path for path, _ in self.entries}
            if lost
            else set().union(*(self._above.get(k, ()) for k in seen))
        )
        arrived |= {os.path.dirname(path) for path in moved}
        for parent in sorted(arrived):
            with contextlib.suppress(OSError):  # gone again: its own appearance will be an event
                self._watch_toward(parent)
        named |= {path for path, _ in self.entries if os.path.dirname(path) in arrived}
        again: list[tuple[str, str]] = []
        for path, kind in self.entries:
            below = any(_under(path, done) for done, k in again if k == "bind")
            if not below and not (lost or path in named):
                continue
            now = _ident(path)
            if now is None or (now == self._covered[path] and not below):
                continue  # gone (nothing to mount on), or the mount on it is still there
            self._covered[path] = now
            again.append((path, kind))
        return again

    def rewatch(self, made: Sequence[tuple[str, str]]) -> None:
        """Watch the directories that replaced watched ones (a watch follows the old inode)."""
        if self._inotify is None:
            return
        for path, _ in made:
            for parent in {p for p, _ in self._names}:
                if _under(parent, path):
                    # Gone again: what lies there is checked when it appears (an event of its own).
                    with contextlib.suppress(OSError):
                        self._watch_toward(parent)

    def events(self) -> tuple[set[tuple[int, bytes]], bool]:
        assert self._inotify is not None
        found, lost = self._inotify.events(self.fd, self._mask())
        return set(found), bool(lost)


def sandbox_pid(bwrap_pid: int) -> int | None:
    """The sandbox's first process (bubblewrap's child in the new namespaces) once its mounts are
    all made: bubblewrap forks the command only after it has set them up and pivoted into the new
    root (a mount made before that would land in the old root, which it then drops)."""
    own = os.stat("/proc/self/ns/mnt").st_ino
    for child in _children(bwrap_pid):
        try:
            if os.stat(f"/proc/{child}/ns/mnt").st_ino != own:
                return child if _children(child) else None
        except OSError:
            continue
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(word) for word in handle.read().split()]
    except OSError:
        return []


def mount_again(pid: int, made: Sequence[tuple[str, str]]) -> bool:
    """In a forked child: enter ``pid``'s mount namespace (and the user namespace owning it, if
    another) and make each mount of ``made`` again; ``True`` when every one that still has a path was made."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            _enter(pid)
            for path, kind in made:
                _mount(path, kind)
            code = 0
        except BaseException:  # the exit code carries it
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) == 0


_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enter(pid: int) -> None:
    """Join ``pid``'s mount namespace, the user namespace that owns it, and its root (bubblewrap
    pivoted into a new one: the namespace's own root is not it); each opened before the first
    ``setns`` changes what ``/proc`` shows. The owner, not ``pid``'s own user namespace: an
    unprivileged bubblewrap sets the mounts up in one user namespace and runs the command in a
    second one inside it, where no capability reaches the mounts."""
    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    owner = fcntl.ioctl(mnt, _NS_GET_USERNS)
    if os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino:
        _check(_libc.setns(owner, _CLONE_NEWUSER), "setns user")
    _check(_libc.setns(mnt, _CLONE_NEWNS), "setns mnt")
    os.fchdir(root)
    os.chroot(".")


def _mount(path: str, kind: str) -> None:
    target = os.fsencode(path)
    if kind == "hide":  # hidden, and absent when the sandbox started: hide what has appeared
        kind = "tmpfs" if os.path.isdir(path) else "null"
    try:
        if kind == "tmpfs":
            _check(_libc.mount(b"tmpfs", target, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755"), path)
        else:
            source = b"/dev/null" if kind == "null" else target
            _check(_libc.mount(source, target, None, _MS_BIND, None), path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return  # the host removed it again: nothing to cover (its next appearance is an event)
        raise
    if kind != "bind":
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        kept = os.statvfs(path).f_flag
        flags |= sum(ms for st, ms in _KEEP_FLAGS if kept & st)
        _check(_libc.mount(None, target, None, flags, None), f"remount read-only {path}")


def keep(
    keeper: Keeper, bwrap_pid: int, remount: Callable[[int, Sequence[tuple[str, str]]], bool] = mount_again
) -> bool:
    """Until ``bwrap_pid`` exits: make the mounts the host undid again (see the module docstring);
    end the sandbox when one cannot be made. ``False`` when it ended the sandbox."""
    pidfd = os.pidfd_open(bwrap_pid)
    poller = select.poll()
    poller.register(keeper.fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    # Replaced before the sandbox was set up, made once it is; a hidden path that appeared after
    # the sandbox's plan found it absent, before the watches were in place, among them.
    pending: list[tuple[str, str]] = keeper.due(set(), True)
    try:
        while True:
            ready = dict(poller.poll(_SETUP_POLL_MS if pending else None))
            if pidfd in ready:
                return True
            if keeper.fd in ready:
                pending += [entry for entry in keeper.due(*keeper.events()) if entry not in pending]
            if not pending:
                continue
            pid = sandbox_pid(bwrap_pid)
            if pid is None:
                continue  # still setting up (its own mounts may predate the change): look again
            made, pending = sorted(pending), []
            if not remount(pid, made):
                os.kill(bwrap_pid, signal.SIGKILL)  # the sandbox's child dies with it (die-with-parent)
                return False
            keeper.rewatch(made)
    except Exception:  # fail closed: a shell whose keeper broke does not go on
        os.kill(bwrap_pid, signal.SIGKILL)
        return False
    finally:
        os.close(pidfd)
