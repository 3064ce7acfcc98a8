"""The render worker's own side of ``offload``: its main loop, and the frame both sides write.

Invariant: a worker holds what its jobs need and nothing more. This module imports only the
standard library's small pieces (no ``asyncio``, which maps OpenSSL, no ``subprocess``, no thread
pool), a job imports its own module by name (``reading``, ``vault.mask``: modules that need neither
the event loop nor the shells' face), and after each job the memory the job freed goes back to the
system (``malloc_trim``): an idle worker holds its imports, never the peak of its last render.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import pickle
import select
import signal
import struct
import sys
from typing import IO, Any

HEADER = struct.Struct("!Q")  # each frame: its length, then that many bytes of pickle
_PR_SET_PDEATHSIG = 1


def read_frame(stream: IO[bytes]) -> bytes | None:
    """One frame's body from ``stream`` (``None``: it ended first)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def serve_jobs(parent: int, idle_exit_s: float) -> None:
    """The worker's main loop: one job at a time from stdin, its reply on stdout, until stdin ends
    or no job came for ``idle_exit_s``; ``parent``: the server's pid."""
    libc = _libc()
    _die_with_parent(libc, parent)
    # Ctrl+C in the server's terminal reaches its whole process group: the server decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    # The replies get a descriptor of their own; anything a job prints goes to stderr, never
    # into a reply.
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # One job is in flight at a time (the server waits for each reply), so nothing waits in the
    # reader's buffer when select looks at the pipe.
    while select.select([stdin], [], [], idle_exit_s)[0] and (job := read_frame(stdin)) is not None:
        stdout.write(_answer(job))
        stdout.flush()
        _release(libc)


def _libc() -> Any:
    with contextlib.suppress(OSError):
        return ctypes.CDLL(None, use_errno=True)  # the C library this interpreter already runs on
    return None


def _die_with_parent(libc: Any, parent: int) -> None:
    # The server killed with SIGKILL never closes the pipe in time for a job in progress.
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the server died before the signal was armed (while this started)
        os._exit(0)


def _release(libc: Any) -> None:
    # A 10 MB render frees tens of megabytes that malloc keeps for reuse; glibc's malloc_trim gives
    # them back (another C library without it keeps them, which costs memory, not correctness).
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.malloc_trim(0)


def _answer(job: bytes) -> bytes:
    """The framed reply to one job: ("ok", result), ("error", its exception), or ("unavailable",
    why) when the function or its arguments cannot be had here (the server then runs it)."""
    try:
        module, qualname, args, kwargs = pickle.loads(job)
        fn: Any = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
    except Exception as exc:
        reply = pickle.dumps(("unavailable", f"{type(exc).__name__}: {exc}"))
    else:
        try:
            reply = pickle.dumps(("ok", fn(*args, **kwargs)), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # the job's own failure goes back to its caller
            try:
                reply = pickle.dumps(("error", exc), pickle.HIGHEST_PROTOCOL)
            except Exception:
                reply = pickle.dumps(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    return HEADER.pack(len(reply)) + reply
