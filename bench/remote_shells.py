"""What a remote shell costs to open and close, and a warm call on it (no assertions).

A loopback SSH host (Debian's sshd on 127.0.0.1, started here as in the tests) serves one engine
(``build_catalog``, as ``bench/sessions.py``): the first open (it connects and probes the host),
20 opens, 150 ``echo hi`` runs 10 ms apart on the first shell, then 20 closes of idle shells.
Comparing two versions: run each with its own ``PYTHONPATH`` (a worktree's ``src``), interleaved.

Run: PYTHONPATH=src .venv/bin/python bench/remote_shells.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hosts"))
from sshd_harness import SSHD, RemoteHosts  # the tests' loopback sshd

from sessions import echo_once  # the run operation alone, as that bench times it
from tether import shells as sh
from tether.config import load_config
from tether.shells import Shells, lifecycle
from tether.tools.catalog import build_catalog


async def open_one(engine: Shells) -> tuple[str, float]:
    t = time.perf_counter()
    rec, _ = await sh.open_shell(
        engine, owner="bench", label="r", cwd="/tmp", cols=120, rows=32, idle_minutes=None, host_name="loop"
    )
    return rec.id, (time.perf_counter() - t) * 1000


async def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="thbr", dir="/tmp"))
    settings = "[sessions]\nmax_sessions = 64\n"
    (home / "config.toml").write_text(settings)
    bare = home / "bare-home"
    bare.mkdir()
    os.environ["HOME"] = str(bare)  # the shells read no ~/.bashrc
    hosts = RemoteHosts(home, Path(tempfile.mkdtemp(prefix="thr", dir="/tmp")))
    hosts.extra_config = settings
    hosts.add("loop")
    catalog = build_catalog(load_config(home), with_jobs=False)
    assert catalog.shell_tools is not None
    engine = catalog.shell_tools.shells()
    try:
        first, connect = await open_one(engine)
        opened = [await open_one(engine) for _ in range(20)]
        for _ in range(20):
            await echo_once(engine, first)
        echo = []
        for _ in range(150):
            await asyncio.sleep(0.01)
            echo.append(await echo_once(engine, first))
        closes = []
        for shell, _ in opened:
            t = time.perf_counter()
            await lifecycle.close(engine, shell, actor="bench")
            closes.append((time.perf_counter() - t) * 1000)
        await lifecycle.close(engine, first, actor="bench")
        opens = [ms for _, ms in opened]
        print(
            f"first open (connects, probes) {connect:.0f} ms | open p50 {statistics.median(opens):.1f} ms "
            f"(min {min(opens):.1f}) | echo p50 {statistics.median(echo):.2f} ms | close p50 "
            f"{statistics.median(closes):.1f} ms (min {min(closes):.1f})"
        )
    finally:
        await catalog.aclose()
        hosts.close()


if __name__ == "__main__":
    if os.path.exists(SSHD):
        asyncio.run(main())
    else:
        print(f"no {SSHD}: nothing to measure (make installs openssh-server)")
