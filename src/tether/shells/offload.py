"""Work proportional to what a program printed runs off the event loop, a bounded amount at once.

Invariant: rendering and searching a shell's log (``reading``), which a program's output can make
arbitrarily long (a 1 MB line without a newline, megabytes of ``\\r``, a 100 MB history), never runs
on the event loop: ``offloaded`` hands it to a small pool of worker threads and awaits the result,
so another conversation's call keeps being served. The pool is bounded (one worker per core, at
least two): a flood of heavy reads queues there instead of starving the process, and the loop
takes the interpreter back every switch interval (5 ms), which bounds how long any call can be
delayed by another call's rendering.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_WORKERS = max(2, os.cpu_count() or 2)
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="tether-render")
    return _pool


# Below this much output, rendering costs less than handing it to a thread (a result waits for it).
INLINE_BYTES = 256 * 1024


async def offloaded(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on a worker thread (it must not touch the event loop)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


async def rendered(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` for ``size`` bytes of output: inline when small, else offloaded."""
    if size < INLINE_BYTES:
        return fn(*args, **kwargs)
    return await offloaded(fn, *args, **kwargs)
