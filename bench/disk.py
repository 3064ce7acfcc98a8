"""The disk's own figure for benchmarks' baselines: what every audited call waits for once."""

from __future__ import annotations

import os
import time
from pathlib import Path


def fsync_times(directory: Path, n: int = 200, *, pause_s: float = 0.0) -> list[float]:
    """Milliseconds of each of ``n`` appends of an audit-sized line and its ``fsync`` in
    ``directory`` (``pause_s`` between them, to pace them like calls); the probe file is removed."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, b"x" * 400 + b"\n")
            os.fsync(fd)
            times.append((time.perf_counter() - start) * 1000)
            if pause_s:
                time.sleep(pause_s)
    finally:
        os.close(fd)
        path.unlink()
    return times
