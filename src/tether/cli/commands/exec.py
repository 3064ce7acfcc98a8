"""``tether exec``: its arguments (``tether.cli.actions.exec`` runs the command).

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

import argparse

from tether.cli.lazy import handler

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
    parser.set_defaults(func=handler("tether.cli.actions.exec", "run"))
