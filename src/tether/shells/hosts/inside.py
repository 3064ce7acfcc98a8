"""Whether a path exists as a confined shell sees it: through its process's root, never the host's.

Invariant: for a confined shell the answer is the sandbox's view — its private ``/tmp``, its masked
``TETHER_HOME`` and hidden paths — and never the host's, whatever the shell left on the way. The
path is resolved one component at a time from ``/proc/PID/root`` with ``openat(O_PATH |
O_NOFOLLOW)``, and symlinks are followed here, by hand: an absolute target starts again at the
sandbox's root and ``..`` never climbs above it. The kernel never follows a link on this walk.

Why by hand: ``os.path.exists("/proc/PID/root/link")`` enters the sandbox's root through the magic
link, but the kernel resolves an *absolute* symlink found there against the reader's root — the
host's — so a shell's ``ln -s $TETHER_HOME/tether.db x`` would answer for the host's hidden file
(an existence oracle), and a component swapped for such a link mid-walk would do the same.

``~`` is the shell's ``HOME`` (from its environment), a relative path is taken from the shell's
working directory (``/proc/PID/cwd`` reads as the path inside the sandbox, its mount namespace).
"""

from __future__ import annotations

import os
import stat
from typing import Final

_MAX_LINKS: Final = 40  # the kernel's own limit (ELOOP)
_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def exists_inside(pid: int, path: str) -> bool:
    """Whether ``path`` exists for process ``pid`` (inside its sandbox); ``False`` when the
    process or the path cannot be looked at."""
    try:
        absolute = _as_the_shell_would(pid, path)
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return False
    stack = [root]  # the directories walked so far, the sandbox's root first
    try:
        return _walk(stack, absolute)
    finally:
        for fd in stack:
            os.close(fd)


def _as_the_shell_would(pid: int, path: str) -> str:
    if path == "~" or path.startswith("~/"):
        home = _environ(pid).get("HOME") or os.path.expanduser("~")
        path = home + path[1:]
    elif path.startswith("~"):
        path = os.path.expanduser(path)  # ~user: the sandbox reads the host's /etc/passwd
    if path.startswith("/"):
        return path
    cwd = os.readlink(f"/proc/{pid}/cwd")
    if not cwd.startswith("/") or cwd.endswith(" (deleted)"):
        raise ValueError(f"no working directory for process {pid}")
    return f"{cwd}/{path}"


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="surrogateescape") for k, v in pairs}


def _walk(stack: list[int], path: str) -> bool:
    pending = [part for part in path.split("/") if part][::-1]  # the next component last
    links = 0
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            if len(stack) > 1:  # at the sandbox's root, .. is the root (as for the shell)
                os.close(stack.pop())
            continue
        try:
            fd = os.open(name, _FLAGS, dir_fd=stack[-1])
        except OSError:
            return False
        try:
            mode = os.fstat(fd).st_mode
            target = os.readlink(name, dir_fd=stack[-1]) if stat.S_ISLNK(mode) else None
        except OSError:
            os.close(fd)
            return False
        if target is not None:
            os.close(fd)
            links += 1
            if links > _MAX_LINKS:
                return False
            if target.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop())
            pending.extend(part for part in target.split("/")[::-1] if part)
            continue
        stack.append(fd)
        if pending and not stat.S_ISDIR(mode):
            return False
    return True
