"""What a running tether process was built from, as one key.

Two front doors keep work from one process for the next: ``tether mcp``'s handshake cache (answers
given before the SDK loads) and the command line's tools process (``tether.cli.door``). Both may
reuse that work only while nothing it depends on changed, and both ask this module. The package's files
go into the key as ``tether.ondisk`` hashes them (the render workers' own check of their build).

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
from pathlib import Path
from typing import Final

from tether import __version__
from tether.home import open_regular
from tether.ondisk import PACKAGE_DIR as _PACKAGE
from tether.ondisk import adder, hasher, tree_key

PACKAGE_DIR: Final = Path(_PACKAGE)


def build_key(home: Path, flags: tuple[str, ...], *, package_dir: Path = PACKAGE_DIR) -> str:
    """Everything a kept answer depends on, hashed (see the module docstring)."""
    digest = hasher()
    add = adder(digest)

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


def _distribution_stamp(package: str) -> list[object]:
    """Where ``package`` would be imported from, and its ``__init__``'s size and mtime."""
    for entry in sys.path:
        init = os.path.join(entry or ".", package, "__init__.py")
        with contextlib.suppress(OSError):
            stat = os.stat(init)
            return [init, stat.st_mtime_ns, stat.st_size]
    return ["absent"]
