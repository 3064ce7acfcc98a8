"""Which paths the guard protects, judged on text alone (the guard never looks at the disk).

Invariant: a path is judged by what it names after normalisation — ``~``, ``$HOME`` and ``~user``
are home directories, ``..`` is collapsed (``/tmp/../..`` is ``/``), a trailing all-wildcard
component (``/*``, ``~/.*``) means "everything in" its parent, and a wildcard elsewhere is
dangerous when it *could* match a protected directory (``/e*`` matches ``/etc``). Only the
protected directories themselves and their contents count: ``/usr/local/lib/foo`` and
``/tmp/x`` are ordinary paths; ``/tmp`` itself is protected (other programs' sockets live there).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

from tether.shells.guard.words import expand_braces

ROOT = "/"
SYSTEM_DIRS: tuple[str, ...] = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/var",
    "/var/lib",
    "/var/log",
)
# "~" is mapped to this path so that "~/..", "~/*" and "/home/alice" read alike.
_HOME = "/home/~"
_HOME_DIR = re.compile(r"^/home/[^/*?\[]+$")
_GLOB = re.compile(r"[*?\[]")
_ALL_GLOB = re.compile(r"^[*?.\[\]!]*[*?][*?.\[\]!]*$")


def normalise(path: str) -> str:
    """``path`` as an absolute-looking path: ``~`` → ``/home/~``, ``..`` collapsed, ``//`` → ``/``."""
    if path.startswith("~"):
        head, _, rest = path.partition("/")
        user = head[1:]
        base = _HOME if not user else ("/root" if user == "root" else f"/home/{user}")
        path = f"{base}/{rest}"
    if path.startswith("/"):
        path = "/" + path.lstrip("/")
    normal = posixpath.normpath(path) if path else path
    return normal.replace("//", "/")


def _strip_everything_in(path: str) -> tuple[str, bool]:
    """``/usr/*`` → (``/usr``, True): a last component that is only wildcards means all contents."""
    contents = False
    while path not in ("/", ".", "..", "") and _ALL_GLOB.match(posixpath.basename(path)):
        path = posixpath.dirname(path) or "."
        contents = True
    return path, contents


def describe(path: str) -> str:
    if path == ROOT:
        return "the root directory /"
    if path == _HOME:
        return "your home directory ~"
    if _HOME_DIR.match(path) or path == "/root":
        return f"the home directory {path}"
    return f"the system directory {path}"


def protected_target(raw: str, extra: Iterable[str] = (), *, homes: bool = True, cwd: str = "") -> str | None:
    """Why deleting or re-permissioning ``raw`` (recursively) is dangerous, or ``None``.

    ``cwd`` is where an earlier literal ``cd`` went; a relative ``raw`` is judged inside it.
    """
    if not raw:
        return None
    if cwd and not raw.startswith(("/", "~")):
        raw = f"{cwd}/{raw}"
    for variant in _variants(raw):
        reason = _judge(variant, tuple(extra), homes=homes)
        if reason is not None:
            return reason
    return None


def _variants(raw: str) -> list[str]:
    # Brace expansion, and word splitting: an unquoted $(echo / /etc) or $X holding "/ /etc"
    # becomes several arguments. (A quoted path with spaces is judged by its parts too, which
    # can only err towards refusing.)
    out: list[str] = []
    for variant in expand_braces(raw):
        out.append(variant)
        parts = variant.split()
        if len(parts) > 1:
            out.extend(parts)
    return out


def _judge(raw: str, extra: tuple[str, ...], *, homes: bool) -> str | None:
    path = normalise(raw)
    if not path.startswith("/"):
        return _judge_relative(path)
    path, contents = _strip_everything_in(path)
    prefix = "everything in " if contents else ""
    candidates = (ROOT, *SYSTEM_DIRS, *(normalise(p) for p in extra), *((_HOME,) if homes else ()))
    for candidate in candidates:
        if path == candidate or (_GLOB.search(path) and fnmatchcase(candidate, path)):
            return prefix + describe(candidate)
    if homes and _HOME_DIR.match(path):
        return prefix + describe(path)
    return None


def _judge_relative(path: str) -> str | None:
    stripped, contents = _strip_everything_in(path)
    parts = stripped.split("/")
    if parts and all(part == ".." for part in parts):
        where = "everything in " if contents else ""
        return f"{where}{stripped} (a parent of the working directory, which may well be / or ~)"
    return None


# Device nodes a program may write without harm.
_HARMLESS_DEV = re.compile(
    r"^/dev/(null|zero|full|random|urandom|stdout|stderr|stdin|tty[0-9A-Za-z]*|console|ptmx"
    r"|fd/[0-9]+|pts/[0-9]+|shm(/.*)?|mqueue(/.*)?)$"
)
_BLOCK_DEV = re.compile(
    r"^/dev/(sd[a-z]+[0-9]*|hd[a-z]+[0-9]*|vd[a-z]+[0-9]*|xvd[a-z]+[0-9]*|nvme[0-9].*|mmcblk[0-9].*"
    r"|disk/.+|mapper/.+|md[0-9].*|md/.+|dm-[0-9]+|loop[0-9]+|sr[0-9]+|fd[0-9]+|nbd[0-9].*|zram[0-9]+"
    r"|rbd[0-9].*|bcache[0-9]+|root|mem|kmem|port)$"
)


def device_target(raw: str) -> bool:
    """True when ``raw`` names a device node other than the harmless ones (``/dev/null``, ttys)."""
    path = normalise(raw)
    return path.startswith("/dev/") and not _HARMLESS_DEV.match(path)


def block_device(raw: str) -> bool:
    """True for disks, partitions, device-mapper and memory devices (``/dev/sda``, ``/dev/nvme0n1``)."""
    path = normalise(raw)
    return bool(_BLOCK_DEV.match(path)) and not _HARMLESS_DEV.match(path)


SYSTEM_FILE_DIRS: tuple[str, ...] = ("/etc", "/boot", "/bin", "/sbin", "/lib", "/lib64", "/usr")


def system_file(raw: str) -> bool:
    """True for a file inside a directory the system needs to boot or log in (``/etc/passwd``)."""
    path = normalise(raw)
    return any(path.startswith(d + "/") for d in SYSTEM_FILE_DIRS)


def is_root(raw: str, cwd: str = "") -> bool:
    """True when ``raw`` names ``/`` itself or everything in it (``/``, ``/*``, ``/tmp/..``, ``//``)."""
    if cwd and not raw.startswith(("/", "~")):
        raw = f"{cwd}/{raw}"
    for variant in _variants(raw):
        path = normalise(variant)
        if path.startswith("/") and _strip_everything_in(path)[0] == "/":
            return True
    return False
