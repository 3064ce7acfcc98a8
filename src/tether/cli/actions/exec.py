"""``tether exec``: run one command through the configured one-shot executor, live.

Called by ``tether.cli.commands.exec`` with the checked command text and the configuration, once
this process's credentials are sealed away and the command container is starting.

Invariant: this door adds no behaviour of its own — the executor decides cwd, timeout cap, env,
capture and tree kill; this module only streams the captured output as it arrives, prints the
closing markers of the rendered result (``tether.shell.render.closing_lines``) on stderr, and maps
the result to an exit status: the command's own exit code, 124 on timeout, 130 when interrupted,
141 when our stdout's reader went away (as SIGPIPE would), 128+N when signal N ended it; output that
cannot be written for another reason (a full disk) stops the command too and is a ``StorageError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from typing import TextIO

from tether.config import MIB, Config
from tether.errors import STORAGE_ERRNOS, StorageError, TetherError
from tether.process.reads import OutputReader
from tether.shell.execution import LocalShellExecution
from tether.shell.options import LocalShellOptions
from tether.shell.providers import executor_from_config
from tether.shell.render import closing_lines
from tether.shell.types import AbortSignal, ShellExecRequest, ShellRunResult

# Output is shown live, so the memory tail only needs to cover what the process layer reads between
# two turns of the pump (at most 8 reads of 1 MiB per wake-up): 16 MiB leaves room, and writing to
# a slow terminal blocks the loop, which stops reading and so pushes back on the command itself.
_LIVE_BUFFER = 16 * MIB
# What a shell reports when a pipeline reader goes away (128 + SIGPIPE).
_EXIT_BROKEN_PIPE = 141


def run(config: Config, command: str, *, timeout_ms: int | None, cwd: str | None, background_ok: bool) -> int:
    """Run ``command`` and return the exit status ``tether exec`` ends with."""
    return asyncio.run(_run(config, command, timeout_ms=timeout_ms, cwd=cwd, background_ok=background_ok))


async def _pump(reader: OutputReader, out: TextIO, name: str, abort: AbortSignal) -> OSError | None:
    """Copy one stream to ``out`` byte for byte as it arrives; the error that ended it when ``out``
    could not take more (its reader gone, a full disk), and the command is stopped then.

    Bytes, not text: `tether exec -- cat image.png > copy.png` must copy, and a character split
    between two reads must not be held back — waiting past an offset that stops before such a
    held tail returned at once, for ever, so the loop never yielded and the command never ended.
    """
    offset = 0
    while True:
        closed = reader.closed  # before the read: everything written by then is in it
        data, start = reader.bytes_from(offset)
        try:
            if start > offset:
                sys.stderr.write(f"\n[tether: {start - offset} bytes of {name} dropped]\n")
                sys.stderr.flush()
            if data:
                out.buffer.write(data)
                out.buffer.flush()
        except OSError as exc:
            # `tether exec -- yes | head -1`, or `> file` on a full disk: nothing more can be shown,
            # so the command ends as SIGPIPE would end it; and the interpreter must not trip over
            # what is still buffered for `out` at exit.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
            abort.fire(f"{name} could not be written: {exc.strerror}")
            return exc
        offset = start + len(data)
        if closed and offset >= reader.total_bytes:
            return None
        await reader.wait_beyond(offset)


async def _run(
    config: Config, command: str, *, timeout_ms: int | None, cwd: str | None, background_ok: bool
) -> int:
    base = LocalShellOptions.from_config(config)
    # No spill file: everything is shown live, and nothing would ever name or read one, so a big
    # output left a copy of up to [shell].max_spill_bytes per stream in spill/ for a day.
    options = dataclasses.replace(
        base, max_output_bytes=max(base.max_output_bytes, _LIVE_BUFFER), max_spill_bytes=0
    )
    executor = executor_from_config(config, options=options, keep_background=background_ok)
    request = ShellExecRequest(command, workdir=cwd, timeout_ms=timeout_ms)
    abort = AbortSignal()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, abort.fire, f"tether exec received {signal.Signals(sig).name}")
    try:
        execution = await executor.execute(executor.resolve(request), abort=abort)
        pumped = await asyncio.gather(
            _pump(execution.observed.stdout, sys.stdout, "stdout", abort),
            _pump(execution.observed.stderr, sys.stderr, "stderr", abort),
        )
        result = await execution.result()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    failed = next((error for error in pumped if error is not None), None)
    if isinstance(failed, BrokenPipeError):
        return _EXIT_BROKEN_PIPE
    if failed is not None:
        raise TetherError(
            f"the command's output could not be written ({failed.strerror}), so it was stopped; "
            "free space where its output goes, or send it elsewhere",
            code=StorageError.code if failed.errno in STORAGE_ERRNOS else "UNAVAILABLE",
        )
    # Everything was shown live (any gap was announced as it happened), so only the closing
    # markers are left to say; a truncation note about the in-memory tail would be misleading.
    lines = closing_lines(result)
    if isinstance(execution, LocalShellExecution) and execution.detached:
        lines.append("[background processes left running]")
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    return exit_status(result)


def exit_status(result: ShellRunResult) -> int:
    if result.timed_out:
        return 124
    if result.aborted:
        return 130
    if result.signal:
        try:
            return 128 + signal.Signals[result.signal].value
        except KeyError:
            return 137
    return result.exit_code if result.exit_code is not None else 1
