"""The ``tether`` command line: a thin front door over the same layers the MCP server uses.

Each command group's arguments live in its own module of ``tether.cli.commands`` exposing
``register(subparsers)``; the module sets ``func`` on its parser, which returns the process exit
status and does its work in the same-named module of ``tether.cli.actions``, imported when it runs.
A ``TetherError`` becomes one line on stderr and exit status 2 — never a traceback; so does output
that a full disk refuses, and a reader that went away (``| head``) ends the command quietly with
141, as SIGPIPE would.

A Ctrl-C ends every command without a traceback, with status 130, whenever it comes: from the
first line of ``tether/__init__.py`` until ``main`` runs a command, and again once the command
returned, and whenever a module is being imported, a handler (``tether._on_interrupt``) ends the
process at once (``os._exit(130)``: nothing is half done then, or a half-made module is all there
is); while the command runs, it raises ``KeyboardInterrupt`` as Python's own does, which
``_guarded`` turns into 130, unless the command handles SIGINT itself. Before tether's first line
runs, Python is still starting (``site``, then finding the package): that is the interpreter's,
out of any program's reach (docs/development.md).

Three command lines skip argparse altogether, because their start-up time is the product:
``tether --version``, ``tether mcp [--sandbox]`` (a client waits for its ``initialize`` answer)
and ``tether exec [OPTIONS] -- COMMAND`` with its options in full (``plain_arguments`` in
``tether.cli.commands.exec``, which reads them as its parser does). Anything else, including
``tether mcp --help`` or a bad flag, goes through the parser — only the named command's, when the
command line starts with one.
"""

from __future__ import annotations

import os
import sys

import tether

# ``_signal``, the built-in module ``signal`` wraps (``signal`` itself costs ~0.7 ms: its enums).
_signal = sys.modules["_signal"] if "_signal" in sys.modules else __import__("_signal")


def _quiet_interrupts() -> bool:
    """Whether a Ctrl-C ends this process at once, quietly, with 130 (``tether._on_interrupt``):
    installed by ``tether/__init__.py`` in the console script; here for ``python -m tether``. Never
    in a program importing tether, nor when the parent left SIGINT ignored."""
    handler = _signal.getsignal(_signal.SIGINT)
    if handler is tether._on_interrupt:
        return True
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or spec.name != "tether.__main__" or handler is not _signal.default_int_handler:
        return False
    _signal.signal(_signal.SIGINT, tether._on_interrupt)
    return True


_QUIET = _quiet_interrupts()

import contextlib  # noqa: E402
import importlib  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from tether import __version__  # noqa: E402
from tether.errors import STORAGE_ERRNOS, StorageError, TetherError  # noqa: E402

if TYPE_CHECKING:
    import argparse

# Command-group modules, in the order ``tether --help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "tether.cli.commands.exec",
    "tether.cli.commands.audit",
    "tether.cli.commands.shell",
    "tether.cli.commands.vault",
    "tether.cli.commands.mcp",
    "tether.cli.commands.serve",
    "tether.cli.commands.panel",
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone: a command line that names its command
    first is parsed by that command's parser, so only its module is imported and only its options
    are built (building them all costs ~15 ms, more than a command of the tools process takes)."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        # argparse drops an OSError from writing its help, usage or version text, so `tether --help`
        # onto a full disk or into a closed pipe ended 0 with nothing written; let it through to
        # ``_guarded``, which says so (2) or ends quietly (141) as for every other output.
        # Sub-parsers are made of the same class (``add_subparsers`` takes the parent's).
        def _print_message(self, message: str, file: Any = None) -> None:
            if message:
                (file or sys.stderr).write(message)

    parser = _Parser(
        prog="tether",
        description="tether: a shell for AI agents — one-shot commands with bounded, non-hanging "
        "results and persistent tmux shells, served over MCP (stdio and HTTP) with a web panel.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        if command is None or module.rpartition(".")[2] == command:
            importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    _open_standard_streams()
    return _guarded(lambda: _dispatch(words))


def _open_standard_streams() -> None:
    """Open /dev/null on a standard descriptor (0, 1, 2) the parent left closed.

    Otherwise the first file tether opens takes that number — ``tether mcp`` then wrote its MCP
    answers into its own log file — and Python's ``sys.stdout`` (or stdin, stderr) is None, so
    every command ended in an ``AttributeError`` traceback. Output has nowhere to go; like a
    reader that left (``| head``), that is no error."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            # Lives as long as the process: no context manager.
            stream = open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)
    # A terminal or pipe in an encoding that is not UTF-8 (a latin-1 locale, PYTHONIOENCODING=ascii)
    # cannot take the help's dashes, the ellipsis of `audit verify` or an agent's non-ASCII label:
    # write what it cannot hold as escapes instead of ending in a UnicodeEncodeError traceback.
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict":
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


def _dispatch(words: list[str]) -> int:
    if words == ["--version"]:
        print(f"tether {__version__}")
        return 0
    if words[:1] == ["mcp"] and set(words[1:]) <= {"--sandbox"}:
        from tether.cli.commands.mcp import serve

        return serve(sandbox="--sandbox" in words)
    if words[:1] == ["exec"]:
        from tether.cli.commands import exec as exec_command

        plain = exec_command.plain_arguments(words[1:])
        if plain is not None:
            return exec_command.start(*plain)
    commands = {module.rpartition(".")[2] for module in COMMAND_MODULES}
    parser = build_parser(words[0] if words[:1] and words[0] in commands else None)
    args = parser.parse_args(words)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args))


def _guarded(run: Callable[[], int]) -> int:
    try:
        try:
            tether._armed = True  # the command's own time: KeyboardInterrupt, outside imports
            try:
                status = run()
            except SystemExit:  # argparse printed --help or a usage error
                sys.stdout.flush()
                raise
            sys.stdout.flush()  # what is still buffered fails here, inside the guard, not at exit
            return status
        finally:
            # The command is over: to the process's end a Ctrl-C ends it at once, quietly (also if
            # the command installed a handler of its own: asyncio puts Python's back).
            tether._armed = False
            if _QUIET:
                _signal.signal(_signal.SIGINT, tether._on_interrupt)
    except TetherError as exc:
        _say(f"tether: {exc.code}: {exc.message}")
        return 2
    except BrokenPipeError:
        _drop_stdout()
        return 141  # the reader went away (`| head`): end quietly, as SIGPIPE would
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        _drop_stdout()  # a full disk under `> file`: say so once, not again at exit
        what = exc.filename or "its output"  # a file of the home names itself; stdout does not
        _say(
            f"tether: {StorageError.code}: {what} could not be written ({exc.strerror}); "
            "free space there, or make it writable"
        )
        return 2
    except KeyboardInterrupt:
        return tether.INTERRUPTED


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # stderr gone too: the exit status still tells
        print(line, file=sys.stderr)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit finds nothing to fail on."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
