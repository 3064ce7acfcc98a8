"""tether's package as its files on disk are now, as one key.

A server that starts Python processes of tether's own (the render workers of
``tether.shells.offload``) must know they run the build it started from: after an upgrade under a
running server (``pip install -U``) the files on disk are another build's. ``tree_key`` hashes
them; ``started_from`` is the first key this process took of its own package. ``tether.stamp``
builds the handshake cache's and the command line's key on the same walk.

Invariant: ``tree_key`` changes whenever a ``.py`` file under the package appears, goes, is renamed
or changes mtime or size, and only then. A render worker runs it first, before any module of the
build on disk it checks, so it imports no other module of tether's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final, Protocol

PACKAGE_DIR: Final = os.path.dirname(os.path.realpath(__file__))


class Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


def hasher() -> Digest:
    """A BLAKE2b-256 hasher. CPython's own ``_blake2`` when it has one: ``hashlib`` loads OpenSSL's
    ``libcrypto`` first, ~4 ms before the first answer on a 2-core VM."""
    try:
        from _blake2 import blake2b
    except ImportError:  # an interpreter without it
        from hashlib import blake2b
    return blake2b(digest_size=32)


def adder(digest: Digest) -> Callable[..., None]:
    """A function that feeds each of its arguments to ``digest``, as text, each one ended."""

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "surrogateescape"))
            digest.update(b"\0")

    return add


def tree_key(package_dir: str | os.PathLike[str] = PACKAGE_DIR) -> str:
    """The files of the package under ``package_dir`` as they are now (``add_tree``), hashed. The
    first one taken of this process's own package is kept: ``started_from``."""
    digest = hasher()
    add_tree(adder(digest), package_dir)
    key = digest.hexdigest()
    if os.fspath(package_dir) == PACKAGE_DIR:
        _STARTED.setdefault(PACKAGE_DIR, key)
    return key


_STARTED: dict[str, str] = {}


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


def add_tree(add: Callable[..., None], root: str | os.PathLike[str]) -> None:
    """Every ``.py`` file under ``root``: its path below it, mtime and size; a directory's files
    first, then its subdirectories, each in name order. (``scandir`` and string slicing rather
    than ``os.walk``, ``stat`` by path and ``relpath``: 2.3 against 7 ms for ~230 files.)"""
    top = os.fspath(root)
    skip = len(top) + 1

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

    walk(top)
