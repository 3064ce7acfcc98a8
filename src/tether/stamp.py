"""What a running tether process was built from, as one key.

Two front doors keep work from one process for the next: ``tether mcp``'s handshake cache (answers
given before the SDK loads) and the command line's tools process (``tether.cli.door``). Both may
reuse that work only while nothing it depends on changed, and both ask this module. A server that
starts Python processes of tether's own (the render workers, ``tether.shells.offload``) asks it too
whether the package on disk is still the one it started from (``started_from``): after an upgrade
under a running server, it is not.

Invariant: ``build_key`` changes whenever any of these does — tether's version, the mtime and size
of every module of the package and where it is, the MCP SDK's files, the interpreter and its
environment (``sys.prefix``), ``PATH``, ``config.toml`` byte for byte, and the caller's own
``flags``; and only then (a venv's ``python`` and ``python3`` give one key). Standard library only
and no dataclasses: it runs before ``tether mcp``'s first answer and before every command that
uses the tools process.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final, Protocol

from tether import __version__
from tether.home import open_regular

PACKAGE_DIR: Final = Path(__file__).resolve().parent


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


def _hasher() -> _Digest:
    """A BLAKE2b-256 hasher. CPython's own ``_blake2`` when it has one: ``hashlib`` loads OpenSSL's
    ``libcrypto`` first, ~4 ms before the first answer on a 2-core VM."""
    try:
        from _blake2 import blake2b
    except ImportError:  # an interpreter without it
        from hashlib import blake2b
    return blake2b(digest_size=32)


def build_key(home: Path, flags: tuple[str, ...], *, package_dir: Path = PACKAGE_DIR) -> str:
    """Everything a kept answer depends on, hashed (see the module docstring)."""
    digest = _hasher()

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "surrogateescape"))
            digest.update(b"\0")

    # The interpreter by what it is, not by the name it was started as (a venv's ``python`` and the
    # ``python3`` a console script names are one), and the environment it runs in.
    add("tether", __version__, sys.version, os.path.realpath(sys.executable), sys.prefix, package_dir, *flags)
    add("PATH", os.environ.get("PATH", ""))
    add(tree_key(package_dir))
    for name in ("mcp", "mcp_types"):
        add("dist", name, *_distribution_stamp(name))
    try:
        with os.fdopen(open_regular(home / "config.toml", os.O_RDONLY), "rb") as config:
            digest.update(config.read())
    except FileNotFoundError:
        add("no config.toml")
    except OSError as exc:  # a directory or a FIFO in its place: reading the config says so
        add("unreadable config.toml", exc.errno)
    return digest.hexdigest()


def tree_key(package_dir: Path = PACKAGE_DIR) -> str:
    """The files of the package under ``package_dir`` as they are now (``add_tree``), hashed. The
    first one taken of this process's own package is kept: ``started_from``."""
    digest = _hasher()

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "surrogateescape"))
            digest.update(b"\0")

    add_tree(add, package_dir)
    key = digest.hexdigest()
    if package_dir == PACKAGE_DIR:
        _STARTED.setdefault(package_dir, key)
    return key


_STARTED: dict[Path, str] = {}


def started_from() -> str:
    """``tree_key`` of this process's package as it was when first taken: at a server's start
    (``tether mcp``'s handshake key; else when ``tether.shells.offload`` is imported, as the tools
    load). What the process imports or starts later is read from disk: after an upgrade under a
    running server (``pip install -U``), another build's files, which this key no longer names."""
    key = _STARTED.get(PACKAGE_DIR)
    return key if key is not None else tree_key()


def upgraded(files: object, what: str) -> str:
    """What a server says when ``files`` of its package changed since it started (``what``: the
    work that needs them, which was not done)."""
    return (
        f"tether's files in {files} changed since this server (pid {os.getpid()}) started: tether "
        f"was upgraded or reinstalled under it. {what}, so it was not run. Restart this server (your "
        "MCP client starts tether mcp again; run tether serve again) to use the new version"
    )


def add_tree(add: Callable[..., None], root: Path) -> None:
    """Every ``.py`` file under ``root``: its path below it, mtime and size; a directory's files
    first, then its subdirectories, each in name order. (``scandir`` and string slicing rather
    than ``os.walk``, ``stat`` by path and ``relpath``: 2.3 against 7 ms for ~230 files.)"""
    skip = len(str(root)) + 1

    def walk(directory: str) -> None:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            if entry.name.endswith(".py") and entry.is_file():
                stat = entry.stat()
                add(entry.path[skip:], stat.st_mtime_ns, stat.st_size)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name not in ("__pycache__", "node_modules"):
                walk(entry.path)

    walk(str(root))


def _distribution_stamp(package: str) -> list[object]:
    """Where ``package`` would be imported from, and its ``__init__``'s size and mtime."""
    for entry in sys.path:
        init = os.path.join(entry or ".", package, "__init__.py")
        with contextlib.suppress(OSError):
            stat = os.stat(init)
            return [init, stat.st_mtime_ns, stat.st_size]
    return ["absent"]
