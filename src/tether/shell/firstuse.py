"""Names a module of the seam imports on first use (PEP 562).

An unconfined command (``tether exec`` by default) never builds the sandbox's types nor the value
types of ``tether.shell.late_types``, and importing them costs a good part of its start; the
modules that name them for others (the face, ``types``, ``env_registry``) give them through
``first_use``.

Invariant: a name is imported from its module the first time it is asked for, and is an ordinary
global of the asking module from then on; a name no source gives is an ``AttributeError``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def first_use(module: str, sources: Mapping[str, frozenset[str]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``module``: each name of a set in ``sources`` comes from the
    module its key names, imported when the name is first asked for."""

    def __getattr__(name: str) -> object:
        for source, names in sources.items():
            if name in names:
                value = getattr(importlib.import_module(source), name)
                setattr(sys.modules[module], name, value)
                return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
