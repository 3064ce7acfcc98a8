"""Where a tether process keeps its state (``$TETHER_HOME``, else ``~/.tether``), and how it
replaces a file there.

Invariant: one rule for every process and door (``tether.config`` re-exports these), and one
directory for a process and everything it starts. A relative ``$TETHER_HOME`` is taken from the
working directory of the first reading in a process, which writes it back absolute (and
normalized) to ``os.environ``: a shell that changes directory, or a child started in another one
(the command line's tools process starts in ``/``), would otherwise find another home. Standard
library only and no dataclasses, so ``tether mcp`` can find its handshake cache before anything
heavier is imported.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path


def home_text(environ: Mapping[str, str] | None = None) -> str:
    """``$TETHER_HOME`` if set and non-empty, else ``~/.tether``: the rule, as text. Absolute and
    normalized (``/a/x/../b/`` is ``/a/b``), so that every spelling of a path tether compares with
    it, such as the guard's of its own tmux socket, meets the one spelling of the home."""
    env = os.environ if environ is None else environ
    value = env.get("TETHER_HOME", "").strip()
    if not value:
        return os.path.join(os.path.expanduser("~"), ".tether")
    try:
        path = os.path.abspath(os.path.expanduser(value))
    except FileNotFoundError:  # relative, and the working directory it is relative to was removed
        from tether.errors import UsageError

        raise UsageError(
            f"TETHER_HOME={value!r} is a relative path and the current directory no longer exists; "
            "set TETHER_HOME to an absolute path, or cd to an existing directory"
        ) from None
    if environ is None and path != env["TETHER_HOME"]:
        os.environ["TETHER_HOME"] = path  # pinned: see the module's invariant
    return path


def current_directory(fix: str) -> str:
    """This process's working directory, or a ``UsageError`` saying it was removed (``getcwd``
    fails with ENOENT then: a server started in a project deleted since), ending with ``fix``."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        from tether.errors import UsageError

        raise UsageError(f"tether's own working directory no longer exists (it was removed); {fix}") from None


def resolve_home(environ: Mapping[str, str] | None = None) -> Path:
    """``home_text`` as a path (same rule everywhere)."""
    return Path(home_text(environ))


def ensure_home(home: Path) -> Path:
    """Create the state directory (mode 0700) and its fixed subdirectories; a ``UsageError`` when
    that cannot be done (a file in the way, a read-only file system), which every door reports.

    An existing home that another user owns or may write into is refused, as ssh refuses such a
    ``~/.ssh``: whoever can create files there can put their own ``token`` (then known to them:
    the HTTP server's key), ``config.toml`` (no sandbox) or ``tether.db`` where tether reads them."""
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(home)
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            from tether.errors import UsageError

            raise UsageError(
                f"TETHER_HOME {home} may be written by other users (mode {stat.S_IMODE(info.st_mode):o}, "
                f"owner uid {info.st_uid}): anyone who can create files there can plant tether's token, "
                f"config.toml or database; make it yours and private (chown {os.geteuid()} {home}; "
                f"chmod 700 {home}), or set TETHER_HOME to a directory of your own"
            )
        for sub in ("audit", "spill", "logs"):
            (home / sub).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        from tether.errors import UsageError

        raise UsageError(
            f"TETHER_HOME {home} cannot hold tether's state ({exc.strerror or exc}: "
            f"{exc.filename or home}); set TETHER_HOME to a directory you can write (tether creates "
            "it if it is missing)"
        ) from exc
    return home


def replace_file(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` at once: a reader sees the old file or the new one, never a
    part of it. The new file is private (0600) and written beside it under a name of its own (no
    other writer's, no symbolic link followed); ``durable``: on disk, file and directory synced,
    when this returns. A failure (a full disk) removes the temporary file and raises."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of a file of the home that must be a regular file, without ever blocking: a
    FIFO in its place would wait for a peer for ever (a reader for a write, a writer for a read).
    Anything but a regular file raises ``OSError`` (EINVAL) saying so; the descriptor is blocking."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, a device or a directory)", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_log(path: Path) -> int:
    """A log file of the home opened to append (0600); anything but a regular file in its place is
    a ``UsageError`` saying to remove it (a FIFO is refused, never waited on)."""
    try:
        return open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENXIO, errno.EISDIR):
            raise
        from tether.errors import UsageError  # here: this module imports the standard library only

        raise UsageError(
            f"{path} is not a regular file (a FIFO, a device or a directory); remove it, and tether "
            "writes its log there"
        ) from exc
