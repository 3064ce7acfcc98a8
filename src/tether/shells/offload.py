"""Work proportional to what a program printed runs outside the server's process, a bounded amount
at once.

Invariant: rendering and searching a shell's log (``reading``), which a program's output can make
arbitrarily long (a 1 MB line without a newline, megabytes of ``\\r``, a 100 MB history), never runs
in the interpreter that serves calls: ``rendered`` hands a large job to a worker process (a thread
of this process waits for it, holding no lock), so no other call waits for that work — not for the
event loop, and not for the interpreter lock either, which a worker thread would take for its whole
time slice. A small job runs inline (the hand-over would cost more than the work). The workers are
bounded (one per core, at least two): a flood of heavy reads queues here instead of starving the
machine.

A worker is a Python process running ``worker.serve_jobs``: it reads one job at a time on its stdin (a
module-level function, its arguments, pickled) and writes the result on its stdout. It is started on
first use, kept for the next job (ending after a minute without one), and ends with its server: it
reads EOF when the server exits or closes it, and the kernel kills it (``PR_SET_PDEATHSIG``) when
the server dies. A job's arguments may hold the vault's masker (a search runs on masked text): they
travel over that private pipe to a child of this process, never to a file. A worker that cannot be
started, cannot import the job, or dies mid-job costs isolation, never the result: the job then
runs on the waiting thread.

``offloaded`` runs a callable on a worker thread of this process instead: for work bound to live
objects (a wait's scanner, the shells' records) that cannot cross to another process.

``bounded`` is for work whose time the caller's input decides: a regular expression a model wrote
(``wait: match``, ``read.search``) can backtrack for years on one short line. It always runs in a
worker process, whatever its size, never falls back to this one, and is given a time: past it the
worker is killed and ``Unfinished`` raised, so neither the server nor the call waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from tether.errors import TetherError
from tether.ondisk import started_from, upgraded
from tether.shells.worker import HEADER, read_frame

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

_WORKERS = max(2, os.cpu_count() or 2)
_pool: ThreadPoolExecutor | None = None
# An idle worker ends after _IDLE_EXIT_S (its memory goes back); the server never hands a job to
# one idle for _IDLE_REUSE_S or more, so a job never meets a worker that is just leaving.
_IDLE_EXIT_S = 60.0
_IDLE_REUSE_S = 30.0
# The exit status of a worker that found another build of tether on disk than its server's.
_STALE_STATUS = 75  # EX_TEMPFAIL
# This process's build, taken now (as the tools load, before any call), unless taken before.
_BUILD = started_from()


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        # One thread per worker process, and as many for ``offloaded``'s own jobs.
        _pool = ThreadPoolExecutor(max_workers=2 * _WORKERS, thread_name_prefix="tether-render")
    return _pool


# Below this much output, rendering costs less than handing it to a worker (a result waits for it).
INLINE_BYTES = 256 * 1024


async def offloaded(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on a worker thread (it must not touch the event loop)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


async def rendered(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` for ``size`` bytes of output: inline when small, else in a worker
    process. ``fn`` is a module-level function of a module that does not need the shells' face
    (``reading``, ``vault.mask``); its arguments and result can be pickled."""
    if size < INLINE_BYTES:
        return fn(*args, **kwargs)
    return await offloaded(_PROCESSES.call, fn, args, kwargs)


class Unfinished(Exception):
    """A ``bounded`` job did not come back: it ran over its time (its worker was killed), or no
    worker process could run it. The message says which."""


class Upgraded(TetherError):
    """tether's files on disk are another build than this server's (an upgrade under it): a
    ``bounded`` job, which runs only in a worker process started from them, cannot run."""

    code = "UNAVAILABLE"


async def bounded(within: float, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker process for at most ``within`` seconds (see the module
    docstring); ``Unfinished`` otherwise. ``fn`` and its arguments are as for ``rendered``."""
    return await offloaded(_PROCESSES.call, fn, args, kwargs, within)


# The worker imports only what its jobs need: ``tether.shells`` stands for the package without
# running its face (the engine, hosts, guard: a worker would hold three times the memory).
# It first checks that the package on disk is the build its server started from (``tether.ondisk``): a
# package upgraded under a running server holds another build's ``reading`` and ``mask``, whose
# functions and classes the server's jobs do not fit. Then it ends at once with ``_STALE_STATUS``.
_BOOT = """\
import os
os.nice(10)  # a render waits behind the calls that need the CPU now (it is one call's own wait)
try:
    from tether.ondisk import started_from
    same = started_from() == {build!r}
except Exception:  # another build's tether, whatever it holds
    same = False
if not same:
    os._exit({stale})
import importlib.util, sys, types
spec = importlib.util.find_spec("tether.shells")
package = types.ModuleType("tether.shells")
package.__path__, package.__spec__ = list(spec.submodule_search_locations), spec
sys.modules["tether.shells"] = package
from tether.shells.worker import serve_jobs
serve_jobs({parent}, {idle_exit_s})
"""


class _WorkerLost(Exception):
    """The worker process ended (or could not start) before it answered."""


class _Stale(_WorkerLost):
    """The worker found another build of tether on disk than its server's, and ended."""


class _Unportable(Exception):
    """The job's function or arguments cannot be pickled (nothing was sent)."""


class _Overran(Exception):
    """A bounded job's time ran out before its worker answered (the worker is still at it)."""


class _Worker:
    """One worker process and its two pipes (used by one thread at a time)."""

    def __init__(self) -> None:
        self.idle_since = time.monotonic()
        self.proc = subprocess.Popen(
            # -P: never a module from the working directory (it may be anyone's).
            [
                sys.executable,
                "-P",
                "-c",
                _BOOT.format(parent=os.getpid(), idle_exit_s=_IDLE_EXIT_S, build=_BUILD, stale=_STALE_STATUS),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )

    def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], within: float | None
    ) -> Any:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            job = pickle.dumps((fn.__module__, fn.__qualname__, args, kwargs), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a job that cannot travel is run where it is
            raise _Unportable(f"{type(exc).__name__}: {exc}") from exc
        try:
            stdin.write(HEADER.pack(len(job)) + job)
            stdin.flush()
            # Each reply is read whole, so nothing of one waits in the reader's buffer: the pipe
            # itself turns readable when the next one starts.
            if within is not None and not select.select([stdout], [], [], within)[0]:
                raise _Overran(f"it did not finish within {within:.1f} s")
            reply = read_frame(stdout)
        except OSError as exc:
            raise _WorkerLost(str(exc)) from exc
        if reply is None:
            try:  # its output ended: it has ended, or is just ending
                status = self.proc.wait(timeout=_IDLE_EXIT_S)
            except subprocess.TimeoutExpired:
                status = None
            if status == _STALE_STATUS:
                raise _Stale(os.path.dirname(os.path.dirname(__file__)))  # the package's directory
            raise _WorkerLost(f"the worker ended (exit status {status})")
        state, value = pickle.loads(reply)
        if state == "unavailable":
            raise _Unportable(value)
        if state == "error":
            raise value
        return value

    def kill(self) -> None:
        """End a worker that is still at its job (``close`` would wait for it)."""
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class _Processes:
    """The process's worker processes: an idle one is taken for a job, a new one started when none
    is idle (the thread pool bounds how many run at once)."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._running = threading.BoundedSemaphore(_WORKERS)
        self._upgraded: str | None = None  # the package's directory, once its files changed

    def call(
        self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], within: float | None = None
    ) -> T:
        with self._running:
            return self._call(fn, args, kwargs, within)

    def _call(
        self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], within: float | None
    ) -> T:
        if self._upgraded is not None:
            return self._without_worker(fn, args, kwargs, within)
        now = time.monotonic()
        with self._lock:
            stale = [w for w in self._idle if now - w.idle_since >= _IDLE_REUSE_S]
            self._idle = [w for w in self._idle if w not in stale]
            worker = self._idle.pop() if self._idle else None
        for old in stale:
            old.close()
        try:
            if worker is None:
                worker = _Worker()
            result: T = worker.call(fn, args, kwargs, within)
        except _Overran as exc:
            assert worker is not None
            worker.kill()
            raise Unfinished(str(exc)) from None
        except _Unportable as exc:
            assert worker is not None
            with self._lock:
                self._idle.append(worker)
            if within is not None:  # never run here: it could hold this process for years
                raise Unfinished(f"it cannot go to a worker process ({exc})") from None
            logger.warning("a render job cannot go to a worker (%s); rendering in the server instead", exc)
            return fn(*args, **kwargs)
        except _Stale as exc:
            assert worker is not None
            worker.close()
            self._upgraded = str(exc)
            logger.warning(
                "tether's files in %s changed: no render worker can serve this server; restart it", exc
            )
            return self._without_worker(fn, args, kwargs, within)
        except (_WorkerLost, OSError) as exc:
            if worker is not None:
                worker.close()
            if within is not None:
                raise Unfinished(f"its worker process failed ({exc})") from None
            logger.warning("a render worker failed (%s); rendering in the server instead", exc)
            return fn(*args, **kwargs)
        except BaseException:
            if worker is not None:
                with self._lock:  # the job failed, the worker did not: keep it
                    self._idle.append(worker)
            raise
        worker.idle_since = time.monotonic()
        with self._lock:
            self._idle.append(worker)
        return result

    def _without_worker(
        self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], within: float | None
    ) -> T:
        """A job once the package on disk is another build's: a render runs here, as it does
        without a worker; a bounded one cannot (it could hold this process for years)."""
        if within is None:
            return fn(*args, **kwargs)
        raise Upgraded(
            upgraded(
                self._upgraded,
                "A search or a wait for a pattern runs in a process started from those files, which "
                "are another version than this server's",
            )
        )

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_PROCESSES = _Processes()


def close_workers() -> None:
    """End the idle worker processes (the next large job starts new ones)."""
    _PROCESSES.close()
