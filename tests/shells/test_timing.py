"""Output timing samples beside each log: what a recording's times are built from."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from tether.shells import timing
from tether.shells.timing import append_sample, read_samples, times_path
from tether.shells.wakeups import LogWatcher

SHELL = "dsh-t1m3ab"


def _write(log: Path, data: bytes) -> None:
    with open(log, "ab") as fh:
        fh.write(data)


async def _until(predicate: object, what: str) -> None:
    async with asyncio.timeout(10):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.005)
    assert predicate(), what  # type: ignore[operator]


async def test_a_watched_log_is_sampled_when_it_grows_and_after_a_burst(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / f"{SHELL}.log"
    _write(log, b"printed while no tether process watched\n")
    before = time.time()
    watcher = LogWatcher(logs, cap=1 << 30)
    watcher.start()
    try:
        path = times_path(logs, SHELL)
        # Starting reads no log (its shell is sampled when the process first lists it).
        assert read_samples(path) == []
        woken = watcher.waker(SHELL)
        _write(log, b"one\n")
        await woken.wait()  # the sample is written in the same wake-up that sets the waker
        size = log.stat().st_size
        await _until(lambda: read_samples(path)[-1][0] == size, "the write is sampled")
        for i in range(50):  # a burst: at most one sample per SAMPLE_S, and the end is sampled
            _write(log, b"x%d\n" % i)
        final = log.stat().st_size
        await _until(lambda: read_samples(path)[-1][0] == final, "the end of the burst is sampled")
        samples = read_samples(path)
        assert [o for o, _t in samples] == sorted(o for o, _t in samples)
        assert all(before <= t <= time.time() for _o, t in samples)
        assert len(samples) < 50
        # Sampling writes inside logs/times/, which the watcher of logs/ is not woken by.
        assert path.parent == logs / "times" and (path.stat().st_mode & 0o777) == 0o600
    finally:
        watcher.close()


def test_a_times_file_over_its_cap_is_thinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "MAX_BYTES", 16 * 100)
    path = tmp_path / "times" / f"{SHELL}.times"
    for i in range(101):
        append_sample(path, i * 10, 1000.0 + i)
    samples = read_samples(path)
    assert 40 <= len(samples) <= 60 and samples[0] == (0, 1000.0) and samples == sorted(samples)
    with open(path, "ab") as fh:  # a torn sample (another process died mid-write) is ignored
        fh.write(b"\x01\x02\x03")
    assert read_samples(path) == samples


async def test_a_process_samples_the_live_shells_it_lists_and_never_a_closed_ones_log(
    tether_home: Path,
) -> None:
    """Each process once sampled every log in the home at start (a closed shell's too: 70 ms for
    3,000 of them, and a write to each one's times file at every start); now it samples what it
    lists live, once, and a closed shell's log not again."""
    from tether.config import load_config
    from tether.tools.catalog import build_catalog
    from tether.tools.registry import CallContext

    ctx = CallContext(actor="conv-times")
    logs = tether_home / "logs"
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        opened = await catalog.registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open", "count": 2}}]}, ctx
        )
        live, closed = (t["shell"] for t in opened.structured["tasks"])
        await catalog.registry.call(
            "shell_manage", {"tasks": [{"target": {"sessions": closed}, "action": {"kind": "close"}}]}, ctx
        )
    finally:
        await catalog.aclose()
    closed_samples = read_samples(times_path(logs, closed))
    # The live shell prints while no tether process watches.
    tmux = ["tmux", "-S", str(tether_home / "tmux.sock")]
    await asyncio.to_thread(
        subprocess.run, [*tmux, "send-keys", "-t", f"={live}:", "echo unwatched", "Enter"], check=True
    )
    log = logs / f"{live}.log"
    await _until(lambda: b"unwatched\r\n" in log.read_bytes(), "the output reaches the log")
    size = log.stat().st_size
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        listed = await catalog.registry.call("shell_state", {}, ctx)
        assert [row["shell"] for row in listed.structured["shells"]] == [live]
        assert read_samples(times_path(logs, live))[-1][0] >= size  # this process's first listing
        assert read_samples(times_path(logs, closed)) == closed_samples
    finally:
        await catalog.aclose()
