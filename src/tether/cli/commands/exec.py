"""``tether exec``: its arguments, and the start before the executor loads.

Invariant: this module imports nothing beyond the standard library at the top; see
``tether.cli.lazy``. ``run`` checks the arguments, reads the configuration, seals the process's own
credentials away (``tether.process.seal``, before any thread or child exists) and begins starting
the command container's PID 1 (``tether.process.container.prepare``) before it imports the executor
(``tether.cli.actions.exec``, asyncio among it: most of the command's start-up), so that PID 1 starts
on another core meanwhile instead of after it, as ``tether mcp`` does while the SDK loads.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse

EPILOG = """\
The command runs as `bash -c COMMAND` (or pwsh, per [shell].provider in config.toml) in its own
process group, with stdin at EOF, a scrubbed environment and pager/editor/prompt defaults that never
wait for input. Several words after `--` are joined with spaces.

--background-ok: background children the command starts (`server &`) are not ended when the
command exits; tether returns as soon as the shell exits (after a short output drain) and stops
reading their output (redirect it, e.g. `server > log 2>&1 &`). A timeout still ends them all.
Without it, nothing the command started outlives it.

Exit status: the command's exit code; 124 when it timed out; 130 when interrupted; 141 when the
reader of tether's stdout went away (the command is ended, as SIGPIPE would); 128+N when signal N
ended it; 2 when tether itself could not run it.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    import argparse

    parser = sub.add_parser(
        "exec",
        help="run one shell command with a deadline, bounded capture and process-tree kill",
        description="Run one command through tether's one-shot executor, streaming its output live "
        "and ending with a footer such as [exit code: N] or [timed out after Nms] on stderr.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        metavar="N",
        help="deadline in milliseconds (default [shell].timeout_ms = 120000, "
        "capped at [shell].max_timeout_ms)",
    )
    parser.add_argument("--cwd", default=None, metavar="DIR", help="working directory (default: current)")
    parser.add_argument(
        "--background-ok",
        action="store_true",
        help="let background children keep running after the command exits",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command text, after --"
    )
    parser.set_defaults(func=run)


def command_text(words: list[str]) -> str:
    """The command line: the words after ``--``, joined with spaces."""
    from tether.errors import UsageError

    if words and words[0] == "--":
        words = words[1:]
    text = " ".join(words).strip()
    if not text:
        raise UsageError("tether exec needs a command after --, e.g. `tether exec -- ls -la`")
    return text


# exec's options in full, each with whether it takes a value (``plain_arguments``).
_OPTIONS = {"--timeout-ms": True, "--cwd": True, "--background-ok": False}


def plain_arguments(words: list[str]) -> tuple[list[str], int | None, str | None, bool] | None:
    """``(command, timeout_ms, cwd, background_ok)`` of the words after ``exec``, read without
    argparse, exactly as its parser (``register``) reads them, when they are the usual shape:
    options in full (``--cwd DIR``, ``--cwd=DIR``), then ``--`` and the command. Anything else —
    ``--help``, an abbreviation, a value that starts with ``-`` or is not a number, no ``--`` —
    is None, and argparse reads it (and says what is wrong). argparse with its help formatter
    (``gettext``, ``locale``, ``shutil``) is ~8 ms of this command's start; ``command`` keeps the
    ``--``, as argparse's ``REMAINDER`` does."""
    timeout_ms: int | None = None
    cwd: str | None = None
    background_ok = False
    at = 0
    while at < len(words):
        word = words[at]
        if word == "--":
            return words[at:], timeout_ms, cwd, background_ok
        name, equals, value = word.partition("=")
        if name not in _OPTIONS or (equals and not _OPTIONS[name]):
            return None
        if _OPTIONS[name] and not equals:
            at += 1
            if at == len(words) or words[at].startswith("-"):
                return None
            value = words[at]
        if name == "--timeout-ms":
            try:
                timeout_ms = int(value)
            except ValueError:
                return None
        elif name == "--cwd":
            cwd = value
        else:
            background_ok = True
        at += 1
    return None


def run(args: argparse.Namespace) -> int:
    return start(list(args.command), args.timeout_ms, args.cwd, bool(args.background_ok))


def start(words: list[str], timeout_ms: int | None, cwd: str | None, background_ok: bool) -> int:
    """Run the command of ``words`` (after ``--``) and end the process with its status."""
    from tether.config import ensure_home, load_config, resolve_home
    from tether.errors import TetherError, UsageError
    from tether.process.container import prepare as prepare_container
    from tether.process.seal import seal_environment

    command = command_text(words)
    if timeout_ms is not None and timeout_ms < 1:
        raise UsageError(f"--timeout-ms must be a positive number of milliseconds (got {timeout_ms})")
    config = load_config(ensure_home(resolve_home()))
    seal_environment(config.env)  # the command cannot read our credentials in /proc/$PPID/environ
    # As early as it can be (after the seal: PID 1 inherits this environment), so that PID 1 has
    # started by the time the command is spawned: what is imported before this line delays it.
    prepare_container()

    import logging

    from tether.mcp.logs import configure_logging

    # Our own warnings (no command container, as for every user but root) go to logs/exec.log:
    # stderr is the command's, byte for byte. A home tether cannot write (read-only, full) keeps
    # no log, and the command still runs; nothing then reaches stderr either (no last resort).
    try:
        configure_logging(config.home, "exec", level=logging.WARNING, stderr=False)
    except (TetherError, OSError):
        logging.getLogger().addHandler(logging.NullHandler())
    # asyncio imports ssl only to offer TLS transports and runs without it (the import is optional
    # there, on every Python tether supports); nothing in this process speaks TLS, and loading
    # OpenSSL costs ~2 ms of its start here. A None entry makes `import ssl` fail at once.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

    from tether.cli.actions import exec as action

    status = action.run(config, command, timeout_ms=timeout_ms, cwd=cwd, background_ok=background_ok)
    _end(status)


def _end(status: int) -> NoReturn:
    """End the process now, with ``status``, skipping the interpreter's teardown.

    The teardown frees every module and object the executor loaded, one by one: about 13 ms here,
    an eighth of the whole command, for memory the kernel takes back at once. Nothing is lost by
    skipping it: the command is over, what was printed is flushed here, the logs' handlers are
    flushed and closed (``logging.shutdown``, the only exit hook that writes), and the command
    container's PID 1 ends with this process (its death pipe closes, whatever way it ends)."""
    import logging

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to show
            stream.flush()
    logging.shutdown()
    os._exit(status)
