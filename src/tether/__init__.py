"""tether: a shell for AI agents.

As a library (docs/library.md)::

    import tether
    with tether.BlockingTether() as t:                   # or: async with tether.Tether() as t:
        result = t.call("bash", {"command": "uname -a", "description": "show the kernel"})
        print(result.text)

``Tether`` (asyncio) and ``BlockingTether`` (synchronous, any thread) call the tools of
docs/tools.md exactly as an agent does; ``ToolResult`` is what a call returns; what a call
raises is a ``TetherError`` (``UsageError``, ``RefusedError``, ``NotFoundError``,
``StorageError``) with a stable ``code``. These names load on first use, so the ``tether``
command pays nothing for them.

Layers import downward only (see docs/development.md and tests/test_layers.py)::

    cli · mcp/ · panel/ ·      front doors, thin
    library/
    tools/                     model-visible tools
    jobs/ · shells/           background jobs; persistent tmux shells
    shell/                     the one-shot executor seam and its providers
    process/                   spawning, bounded capture, tree kill
    store/ · audit/            SQLite store and the append-only audit log
    config · home · inotify    settings, TETHER_HOME, file-change wake-ups
    errors

The first lines below are the ``tether`` command's (``tether.cli``): a Ctrl-C while it is still
importing ends it quietly with status 130. They run here, as early as tether's code can run, and
only in the command's process (its console script, not a program importing tether). No
``from __future__`` import here: that is an import of its own, read from disk before the next line.
"""

import os as _os  # loaded already, as is sys: importing them runs no code
import sys as _sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

    from tether.errors import NotFoundError, RefusedError, StorageError, TetherError, UsageError
    from tether.library import BlockingTether, Tether, ToolResult

__all__ = [
    "BlockingTether",
    "NotFoundError",
    "RefusedError",
    "StorageError",
    "Tether",
    "TetherError",
    "ToolResult",
    "UsageError",
    "__version__",
]
_LIBRARY = ("BlockingTether", "Tether", "ToolResult")
_ERRORS = ("NotFoundError", "RefusedError", "StorageError", "TetherError", "UsageError")

__version__ = "0.1.0"
INTERRUPTED = 130  # the status of a command SIGINT ended, as a shell reports it
_armed = False  # set by ``tether.cli`` while a command runs, outside its imports


def _on_interrupt(_signum: int, frame: "FrameType | None") -> None:
    """The ``tether`` command's SIGINT handler: Python's ``KeyboardInterrupt`` while the command
    runs; at once, quietly, status 130 before and after it, and while a module is being imported
    (an import cut halfway leaves a module half made, and an extension such as pydantic_core turned
    the interrupt into a panic with a traceback of its own)."""
    if _armed:
        outer = frame
        while outer is not None and not outer.f_code.co_filename.startswith("<frozen importlib"):
            outer = outer.f_back
        if outer is None:
            raise KeyboardInterrupt
    _os._exit(INTERRUPTED)


# Python raises a pending KeyboardInterrupt at a function's entry and after each call (nothing
# above calls anything), and ``getsignal`` and ``signal`` (which checks before it changes
# anything) are calls: a SIGINT that came before the handler was in place is caught here, in the
# command's process only. ``_signal`` is the built-in module ``signal`` wraps (``signal`` itself
# costs ~0.7 ms: its enums). ``python -m tether`` imports this package before it is
# ``__main__``: ``tether.cli`` asks again. The command is a program named exactly ``tether``: a
# program of its own that imports the library (``my-tether``, ``agenttether``) keeps Python's own
# Ctrl-C, its ``finally`` blocks and its clean-up, instead of ending at once with status 130.
_COMMAND = (_sys.argv[0] == "tether" or _sys.argv[0][-7:] == "/tether") if _sys.argv else False
try:
    if _COMMAND and "_signal" in _sys.modules:
        _signal = _sys.modules["_signal"]
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:  # not ignored by the parent
            _signal.signal(_signal.SIGINT, _on_interrupt)
except KeyboardInterrupt:
    if not _COMMAND:
        raise
    _os._exit(INTERRUPTED)


if not TYPE_CHECKING:  # outside the type checker's view, so that it still refuses a name not here

    def __getattr__(name: str) -> object:
        """The library's names (PEP 562), imported on first use: see the docstring."""
        if name in _ERRORS:
            from tether import errors as module
        elif name in _LIBRARY:
            from tether import library as module
        else:
            raise AttributeError(f"module 'tether' has no attribute {name!r}")
        value = getattr(module, name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        """The module's names, the ones loaded on first use included (``dir(tether)``, ``help``)."""
        return sorted({*globals(), *__all__})
