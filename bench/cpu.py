"""Where the CPU of a shell call goes, process by process, and what wall time that CPU allows here.

A shell ``echo hi`` through MCP is a chain of processes: the official client, ``tether mcp``, the
tmux server, the shell's bash and the ``cat`` that appends its pane to the log. Each runs in turn,
mostly one after another, on this machine's cores. No assertions (see DESIGN.md): for one shell
and for eight shells in one call it prints the round trip (back to back, like ``bench/peers.py``'s
figures) and the CPU each process spent per call, from the scheduler's nanosecond counts of every
thread in ``/proc/<pid>/task/*/schedstat``, and two bounds the CPU sets on the wall time:

- *all processes over all cores*: the summed CPU divided by the cores, the least any call could
  take even if every process ran in parallel with every other (they mostly cannot: each waits for
  the one before it);
- *the busiest thread*: one thread's CPU cannot be split across cores (tether's event loop runs
  the guard, the records and the MCP framing of all eight shells).

Kernel workers (the terminal's input, the disk) are not counted: their CPU is not anybody's.

Run: .venv/bin/python bench/cpu.py [calls]  (default 600; a tenth as many for eight shells)
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
from peers import TETHER, _task, env_for

WARM = 30  # calls before measuring: the shells' first prompts, the caches


def _threads_ns(pid: int) -> dict[int, int]:
    """CPU time (ns) each thread of ``pid`` has run so far."""
    found: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return found


def _roles(scratch: Path, server: psutil.Process) -> dict[str, list[int]]:
    """The pids of each role in the chain of a call."""
    roles: dict[str, list[int]] = {"client": [os.getpid()], "tether mcp": [server.pid]}
    sock = str(scratch / "tether" / "tmux.sock")
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "tmux: server" and sock in " ".join(proc.info["cmdline"] or []):
            roles["tmux server"] = [proc.pid]
            for child in proc.children(recursive=True):
                if child.name() in ("bash", "cat"):
                    roles.setdefault(child.name(), []).append(child.pid)
    return roles


async def measure(scratch: Path, shells: int, calls: int) -> tuple[list[float], dict[str, float], float]:
    """Round trips (ms), CPU per call (ms) by role, and the busiest thread's CPU per call (ms)."""
    params = StdioServerParameters(command=TETHER, args=["mcp"], env=env_for(scratch))
    async with Client(params, mode="legacy") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}] * shells})
        assert opened.structured_content is not None
        arguments: dict[str, Any] = {
            "tasks": [_task(t["shell"], "echo hi") for t in opened.structured_content["tasks"]]
        }
        server = next(p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline())
        for _ in range(WARM):
            await client.call_tool("shell_run", arguments)
        roles = _roles(scratch, server)
        pids = [pid for group in roles.values() for pid in group]
        before = {pid: _threads_ns(pid) for pid in pids}
        walls: list[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("shell_run", arguments)
            walls.append((time.perf_counter() - start) * 1000)
            assert not result.is_error, result.content
        after = {pid: _threads_ns(pid) for pid in pids}
    spent = {pid: {tid: ns - before[pid].get(tid, 0) for tid, ns in after[pid].items()} for pid in pids}
    per_call = {
        role: sum(sum(spent[pid].values()) for pid in group) / calls / 1e6 for role, group in roles.items()
    }
    busiest = max(ns for threads in spent.values() for ns in threads.values()) / calls / 1e6
    return walls, per_call, busiest


def _kill_tmux(scratch: Path) -> None:
    sock = scratch / "tether" / "tmux.sock"
    if sock.exists():
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"bench/cpu.py  {when}  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  cores {cores}")
    for shells, n in ((1, calls), (8, max(calls // 10, 20))):
        scratch = Path(tempfile.mkdtemp(prefix="thcpu", dir="/tmp"))
        try:
            walls, per_call, busiest = asyncio.run(measure(scratch, shells, n))
        finally:
            _kill_tmux(scratch)
            shutil.rmtree(scratch, ignore_errors=True)
        total = sum(per_call.values())
        others = total - per_call["tether mcp"]
        print(f"{shells} shell{'s' if shells > 1 else ''} × `echo hi`, {n} calls back to back: "
              f"p50 {statistics.median(walls):.2f} ms")  # fmt: skip
        print("  CPU per call: " + ", ".join(f"{role} {ms:.2f} ms" for role, ms in per_call.items()))
        print(f"  all processes {total:.2f} ms (without tether mcp {others:.2f} ms); "
              f"over {cores} cores at least {total / cores:.2f} ms; "
              f"the busiest thread {busiest:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
