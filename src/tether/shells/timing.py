"""When a shell's output was printed: ``(offset, time)`` samples beside its log.

Invariant: a sample ``(o, t)`` in ``logs/times/<shell>.times`` says that by epoch time ``t`` the log
held at least ``o`` bytes — every byte before ``o`` was printed at or before ``t``. The pane log
itself has bytes and no times (tmux's ``pipe-pane`` writes them as they come); these samples are
what a recording's timing is built from, together with the exact times the shell stamps on its
own command events (``$EPOCHREALTIME`` on ``C`` and ``P``), which the reader merges in.

Who writes them: every tether process whose log watcher sees a log grow (``OutputClock.note``,
called on the watcher's inotify wake-ups) appends one sample per shell at most every ``SAMPLE_S``,
plus a trailing sample once a burst ends, so a byte's time is known to within ``SAMPLE_S``. A
process also samples each live shell's log the first time it lists the shell (``ShellHost.panes``):
what was printed while no tether process watched gets that time. Logs of closed shells are never
sampled again, so a home's history costs a starting process nothing. Several processes may append
to one file at once: each sample is one 16-byte ``O_APPEND`` write, so samples never interleave;
their order and duplicates do not matter (the reader gives each byte the earliest time of any
sample at or after it). While no tether process runs, nothing samples: the bytes printed then get
the time of the next sample (the next process's first listing, or the next output it sees) — their
true time lies between the previous sample and that one.

The samples live in a sub-directory of the logs directory: inotify on the logs directory does not
report writes inside it, so sampling never wakes the watcher. A file over ``MAX_BYTES`` is thinned
(every other sample dropped) by the process that finds it so; a sample another process appended
meanwhile may be lost, which only makes the times of those bytes coarser.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import struct
import time
from pathlib import Path

from tether.home import replace_file

SAMPLE_S = 0.02
MAX_BYTES = 4 << 20
_SAMPLE = struct.Struct("<Qd")
TIMES_DIR = "times"


@functools.lru_cache(maxsize=4096)
def times_path(logs_dir: Path, shell_id: str) -> Path:
    return logs_dir / TIMES_DIR / f"{shell_id}.times"  # kept: asked on every sample


def read_samples(path: Path) -> list[tuple[int, float]]:
    """Every whole sample of a times file, in file order (a torn tail is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    usable = len(data) - len(data) % _SAMPLE.size
    return [_SAMPLE.unpack_from(data, i) for i in range(0, usable, _SAMPLE.size)]


def append_sample(path: Path, offset: int, at: float) -> None:
    """One sample, one ``O_APPEND`` write (creating the file, 0600, and its directory, 0700)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, _SAMPLE.pack(offset, at))
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        _thin(path)


def _thin(path: Path) -> None:
    samples = sorted(set(read_samples(path)))
    kept = samples[::2] + ([samples[-1]] if len(samples) % 2 == 0 and samples else [])
    replace_file(path, b"".join(_SAMPLE.pack(o, t) for o, t in kept))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class OutputClock:
    """Samples the logs of one logs directory as the watcher sees them grow (see the docstring)."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self._last: dict[str, tuple[int, float]] = {}
        self._trailing: dict[str, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin on ``loop`` (the logs that exist are sampled as their shells are first listed)."""
        self._loop = loop

    def close(self) -> None:
        for handle in self._trailing.values():
            handle.cancel()
        self._trailing.clear()
        self._loop = None

    def note(self, shell_id: str, size: int | None = None) -> None:
        """The shell's log was written (``size``: its size, if the caller has just read it):
        sample it now, or once ``SAMPLE_S`` after the last sample."""
        if size is None:
            size = _size(self.logs_dir / f"{shell_id}.log")
        now = time.time()
        last = self._last.get(shell_id)
        if last is not None and size <= last[0]:
            return
        if last is not None and now - last[1] < SAMPLE_S:
            if shell_id not in self._trailing and self._loop is not None:
                self._trailing[shell_id] = self._loop.call_later(SAMPLE_S, self._trail, shell_id)
            return
        self._last[shell_id] = (size, now)
        with contextlib.suppress(OSError):  # a full disk costs timing precision, never the watcher
            append_sample(times_path(self.logs_dir, shell_id), size, now)

    def _trail(self, shell_id: str) -> None:
        self._trailing.pop(shell_id, None)
        self.note(shell_id)

    def held(self) -> set[str]:
        return {*self._last, *self._trailing}

    def forget(self, shell_id: str) -> None:
        """The shell was closed: its samples are complete (its log no longer grows)."""
        self._last.pop(shell_id, None)
        handle = self._trailing.pop(shell_id, None)
        if handle is not None:
            handle.cancel()
