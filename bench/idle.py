"""What idling between calls costs: a shell ``echo hi`` back to back, and after a pause.

An agent's calls come seconds apart; the other benchmarks call back to back. No assertions (see
DESIGN.md): it prints p50s and ratios against no pause, measured in the same run, rounds
interleaved so the machine's drift hits every pause alike:

- ``tether mcp`` through the official client: the round trip, and the server's CPU time per call
  (every thread of the server process, from the scheduler's nanosecond counts in ``/proc``);
- a bare bash pane through tmux, no tether (``bench/peers.py``'s floor), with the same pauses;
- the same few milliseconds of plain Python (JSON and hashing) after the same sleep: the CPU time
  a fixed piece of work takes once the process has idled.

If all three grow alike, the pause costs what any process pays after idling on this machine (cold
caches, a descheduled virtual CPU), not something tether does while it waits.

Run: .venv/bin/python bench/idle.py [rounds]  (default 5)
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
from peers import TETHER, _task, engine_floor, env_for

PAUSES_S = (0.0, 0.05, 0.5)
CALLS = {0.0: 40, 0.05: 20, 0.5: 6}  # per round and pause: a round lasts ~10 s


async def tether_calls(env: dict[str, str], rounds: int) -> dict[float, tuple[list[float], list[float]]]:
    """Round trip (ms) and server CPU (ms) of each ``shell_run echo hi``, by pause."""
    found: dict[float, tuple[list[float], list[float]]] = {p: ([], []) for p in PAUSES_S}
    params = StdioServerParameters(command=TETHER, args=["mcp"], env=env)
    async with Client(params, mode="legacy") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        assert opened.structured_content is not None
        arguments = {"tasks": [_task(opened.structured_content["tasks"][0]["shell"], "echo hi")]}
        server = next(p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline())
        for _ in range(20):  # warm: the shell's first prompts, the caches
            await client.call_tool("shell_run", arguments)
        for _ in range(rounds):
            for pause in PAUSES_S:
                walls, cpus = found[pause]
                for _ in range(CALLS[pause]):
                    await asyncio.sleep(pause)
                    before = _cpu_ns(server.pid)
                    start = time.perf_counter()
                    result = await client.call_tool("shell_run", arguments)
                    walls.append((time.perf_counter() - start) * 1000)
                    cpus.append((_cpu_ns(server.pid) - before) / 1e6)
                    assert not result.is_error, result.content
    return found


def _cpu_ns(pid: int) -> int:
    """The time every thread of ``pid`` has run on a CPU, in nanoseconds (``psutil``'s CPU times
    count clock ticks of 10 ms: too coarse for one call)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def python_cpu(rounds: int) -> dict[float, list[float]]:
    """CPU time (ms) of a fixed piece of plain Python after sleeping each pause."""
    data = {"numbers": list(range(200)), "text": "x" * 500}

    def work() -> None:
        for _ in range(20):
            text = json.dumps(data)
            json.loads(text)
            hashlib.sha256(text.encode()).hexdigest()

    found: dict[float, list[float]] = {p: [] for p in PAUSES_S}
    for _ in range(rounds):
        for pause in PAUSES_S:
            for _ in range(CALLS[pause]):
                time.sleep(pause)
                start = time.thread_time()
                work()
                found[pause].append((time.thread_time() - start) * 1000)
    return found


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    scratch = Path(tempfile.mkdtemp(prefix="thidle", dir="/tmp"))
    env = env_for(scratch)
    load = os.getloadavg()
    try:
        calls = asyncio.run(tether_calls(env, rounds))
        bare: dict[float, list[float]] = {p: [] for p in PAUSES_S}
        for _ in range(rounds):
            for pause in PAUSES_S:
                (echo,) = engine_floor(scratch, CALLS[pause], commands=("echo hi",), pause_s=pause)
                bare[pause].append(echo)
        plain = python_cpu(rounds)
    finally:
        sock = scratch / "tether" / "tmux.sock"
        if sock.exists():
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"bench/idle.py  {when}  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  rounds {rounds}")
    print(f"{'pause before each call':24s}" + "".join(f"{f'{p * 1000:.0f} ms':>20s}" for p in PAUSES_S))
    rows = [
        ("tether shell echo, p50", {p: statistics.median(calls[p][0]) for p in PAUSES_S}),
        ("  its server's CPU", {p: statistics.median(calls[p][1]) for p in PAUSES_S}),
        ("bare bash pane echo", {p: statistics.median(bare[p]) for p in PAUSES_S}),
        ("plain Python, CPU", {p: statistics.median(plain[p]) for p in PAUSES_S}),
    ]
    for label, figures in rows:
        base = figures[0.0]
        cells = "".join(f"{f'{figures[p]:.2f} ms ({figures[p] / base:.2f}×)':>20s}" for p in PAUSES_S)
        print(f"{label:24s}{cells}")


if __name__ == "__main__":
    main()
