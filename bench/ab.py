"""Two versions of tether side by side: the same calls through the official MCP client, interleaved.

A change worth a few percent drowns in this machine's drift between two runs of ``bench/peers.py``
minutes apart. Here both servers run at once (each with its own ``TETHER_HOME`` and tmux server)
and take turns, a block of calls each, so the machine's slow and fast minutes fall on both alike.
No assertions (see DESIGN.md): it prints each version's p50, p90 and p99 for each measure, and the
p50s' ratio, measured in the same run (a p99 needs a few hundred calls: ``--rounds 25`` or more),
and the CPU ``tether mcp`` itself spent per call (every thread's, from the scheduler's nanosecond
counts, as ``bench/cpu.py`` reads them) with its ratio: on a machine other work keeps busy the
wall times of the two versions differ by several per cent from one run to the next, while the
server's own CPU per call, though the load's cache misses swell it too, moves far less.

    .venv/bin/python bench/ab.py --base /path/to/other/checkout/src [--new src] [--rounds 8]

``--base`` and ``--new`` name a ``src`` directory holding a ``tether`` package (for instance a
``git worktree`` of the commit before a change); each server runs as ``python -m tether mcp``
with that directory first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
from cpu import _threads_ns
from peers import _task, env_for

MEASURES = {  # name → (shells in the call (0: the one-shot bash tool), command, calls per block)
    "one-shot echo hi": (0, "echo hi", 40),
    "shell echo hi": (1, "echo hi", 40),
    "8 shells x echo hi": (8, "echo hi", 8),
    "50 ms command": (1, "sleep 0.05", 6),
}


_SERVERS: set[int] = set()


def _new_server() -> int:
    """The pid of the ``tether mcp`` this process started last (not one found before)."""
    for child in psutil.Process().children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.Error:  # a process that ended meanwhile
            continue
        if child.pid not in _SERVERS and argv[-2:] == ["tether", "mcp"]:
            _SERVERS.add(child.pid)
            return child.pid
    raise SystemExit("no tether mcp process found among this process's children")


def _cpu_ms(pid: int, before: dict[int, int]) -> float:
    """CPU (ms) ``pid``'s threads spent since ``before`` (a thread that ended meanwhile is left out)."""
    return sum(ns - before.get(tid, 0) for tid, ns in _threads_ns(pid).items()) / 1e6


@asynccontextmanager
async def server(src: Path, scratch: Path) -> AsyncIterator[tuple[Client, list[str], int]]:
    env = env_for(scratch) | {"PYTHONPATH": str(src)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "tether", "mcp"], env=env)
    try:
        async with Client(params) as client:
            opened = await client.call_tool(
                "shell_open", {"tasks": [{"action": {"kind": "open"}} for _ in range(8)]}
            )
            data: Any = opened.structured_content
            yield client, [t["shell"] for t in data["tasks"]], _new_server()
    finally:
        sock = scratch / "tether" / "tmux.sock"
        await asyncio.to_thread(
            subprocess.run, ["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False
        )


async def call(client: Client, shells: list[str], command: str) -> float:
    start = time.perf_counter()
    if shells:
        result = await client.call_tool("shell_run", {"tasks": [_task(s, command) for s in shells]})
    else:
        result = await client.call_tool("bash", {"command": command, "description": "greet"})
    took = (time.perf_counter() - start) * 1000
    data: Any = result.structured_content
    failed = data.get("exitCode") != 0 if not shells else any(t.get("exitCode") != 0 for t in data["tasks"])
    if result.is_error or failed:
        raise SystemExit(f"a call failed: {result}")
    return took


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


SRC = Path(__file__).resolve().parent.parent / "src"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--new", type=Path, default=SRC)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="thab", dir="/tmp"))
    print(f"1-minute load average {os.getloadavg()[0]:.2f}; base {args.base}, new {args.new}")
    try:
        async with AsyncExitStack() as stack:
            versions = {
                name: await stack.enter_async_context(server(src.absolute(), root / name))
                for name, src in (("base", args.base), ("new", args.new))
            }
            for client, shells, _pid in versions.values():  # warm: first prompts, caches
                for _ in range(20):
                    await call(client, shells[:1], "echo hi")
                await call(client, shells, "echo hi")
            times: dict[tuple[str, str], list[float]] = {}
            cpu: dict[tuple[str, str], float] = {}  # the server's CPU (ms) over those calls
            for r in range(args.rounds):
                order = list(versions.items()) if r % 2 == 0 else list(reversed(versions.items()))
                for measure, (width, command, block) in MEASURES.items():
                    for name, (client, shells, pid) in order:
                        got = times.setdefault((measure, name), [])
                        before = _threads_ns(pid)
                        for _ in range(block):
                            got.append(await call(client, shells[:width], command))
                        cpu[(measure, name)] = cpu.get((measure, name), 0.0) + _cpu_ms(pid, before)
            for measure in MEASURES:
                base, new = times[(measure, "base")], times[(measure, "new")]
                b50, n50 = statistics.median(base), statistics.median(new)
                print(
                    f"{measure:20} base p50 {b50:6.2f} p90 {pct(base, 0.9):6.2f} "
                    f"p99 {pct(base, 0.99):6.2f} ms | new p50 {n50:6.2f} p90 {pct(new, 0.9):6.2f} "
                    f"p99 {pct(new, 0.99):6.2f} ms | "
                    f"new/base {n50 / b50:.3f} "
                    f"({len(new)} calls each)"
                )
            for measure in MEASURES:
                base_cpu = cpu[(measure, "base")] / len(times[(measure, "base")])
                new_cpu = cpu[(measure, "new")] / len(times[(measure, "new")])
                print(
                    f"{measure:20} tether mcp's CPU per call: base {base_cpu:6.3f} ms | "
                    f"new {new_cpu:6.3f} ms | new/base {new_cpu / base_cpu:.3f}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
