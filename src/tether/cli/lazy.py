"""Command handlers imported when they run, not when the parser is built.

Invariant: building the ``tether`` parser imports only the standard library and the modules of
``tether.cli.commands``, which hold nothing but argument definitions. What a command needs (the SDK,
the shell engine, SQLite, cryptography) is imported by its module of ``tether.cli.actions`` on first
call, so ``tether --version``, ``--help`` and a command's ``--help`` cost an interpreter start plus
argparse, and each command pays only for its own imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

Handler = Callable[["argparse.Namespace"], int]


def handler(module: str, name: str) -> Handler:
    """A ``func`` for ``set_defaults`` that imports ``module`` and calls its ``name`` when run."""

    def run(args: argparse.Namespace) -> int:
        target: Handler = getattr(importlib.import_module(module), name)
        return target(args)

    run.__qualname__ = f"{module}.{name}"
    return run
