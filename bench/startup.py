"""How fast ``tether`` starts: prints medians and ratios (no assertions; see the README).

1. Time from spawning a stdio server to its ``initialize`` answer, and then to its ``tools/list``
   answer, for ``tether mcp`` (handshake cache warm, the usual case; and cold, the first start
   after an install, upgrade or config change), for a minimal server written with the same SDK
   (``bench/minimal_server.py``), and for ``python -c pass`` (spawn → exit). Spoken in raw
   JSON-RPC over pipes, so no client's own cost is in the figures. Budgets: ``initialize`` ≤
   150 ms, and ≤ 1.5 × the minimal SDK server.
2. Wall and CPU time (user + system) of ``tether --version``, ``tether --help`` and commands that
   need no server (``tether exec -- true``; ``tether shell list``, ``tether audit verify`` and
   ``tether vault list``, which act through the tools, in the home's tools process: the usual
   case, that process already running, and the first command of a home, which starts it) against
   ``python -c pass``. Budget: wall time < 100 ms. The CPU column is the command's own: a running
   tools process is nobody's child, so its share is not in it.

All variants are interleaved round-robin in one run, so load drifts hit each alike.
Run: .venv/bin/python bench/startup.py [ROUNDS]
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tether.cli.door import stop_door

BIN = Path(sys.executable).parent
TETHER = str(BIN / "tether")
FIRST = "tether shell list (first of a home)"
MINIMAL = str(Path(__file__).with_name("minimal_server.py"))
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def _line(message: dict[str, object]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def handshake(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(ms to the initialize answer, ms to the tools/list answer), both from spawn."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_line(INITIALIZE))
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        while answer.get("id") != 1:  # a server may notify (log) before it answers
            answer = json.loads(proc.stdout.readline())
        initialized = time.perf_counter()
        assert "result" in answer, answer
        proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        proc.stdin.write(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        proc.stdin.flush()
        while json.loads(proc.stdout.readline()).get("id") != 2:
            pass
        listed = time.perf_counter()
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return (initialized - start) * 1000, (listed - start) * 1000


def spawned(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of a command run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    root = Path(tempfile.mkdtemp(prefix="thstart", dir="/tmp"))
    warm_home, cold_home = root / "warm", root / "cold"
    warm_home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    warm_env = {**env, "TETHER_HOME": str(warm_home)}
    handshake([TETHER, "mcp"], warm_env)  # records the handshake cache, as any first session does

    def cold() -> tuple[float, float]:
        shutil.rmtree(cold_home, ignore_errors=True)
        return handshake([TETHER, "mcp"], {**env, "TETHER_HOME": str(cold_home)})

    first_home = root / "first"

    def first_command() -> tuple[float, float]:
        """``tether shell list`` in a fresh home: it starts the home's tools process."""
        try:
            return spawned([TETHER, "shell", "list"], {**env, "TETHER_HOME": str(first_home)})
        finally:
            stop_door(first_home)
            shutil.rmtree(first_home, ignore_errors=True)

    servers: dict[str, Callable[[], tuple[float, float]]] = {
        "tether mcp (cache warm)": lambda: handshake([TETHER, "mcp"], warm_env),
        "tether mcp (first start)": cold,
        "minimal SDK server": lambda: handshake([sys.executable, MINIMAL], env),
    }
    commands: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tether --version": [TETHER, "--version"],
        "tether --help": [TETHER, "--help"],
        "tether exec -- true": [TETHER, "exec", "--", "true"],
        "tether shell list": [TETHER, "shell", "list"],
        "tether audit verify": [TETHER, "audit", "verify"],
        "tether vault list": [TETHER, "vault", "list"],
    }
    spawned([TETHER, "shell", "list"], warm_env)  # the warm home's tools process, as any first command
    init: dict[str, list[float]] = {name: [] for name in servers}
    listed: dict[str, list[float]] = {name: [] for name in servers}
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, run in servers.items():
            a, b = run()
            init[name].append(a)
            listed[name].append(b)
        for name, argv in commands.items():
            wall, cpu = spawned(argv, warm_env)
            walls[name].append(wall)
            cpus[name].append(cpu)
        wall, cpu = first_command()
        walls.setdefault(FIRST, []).append(wall)
        cpus.setdefault(FIRST, []).append(cpu)
    stop_door(warm_home)
    sock = warm_home / "tmux.sock"  # in case a shell command started the home's tmux server
    if sock.exists():
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)

    med = statistics.median
    base = med(init["minimal SDK server"])
    print(
        f"bench/startup.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  load average {os.getloadavg()[0]:.2f}"
        f" {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}  rounds {rounds}"
    )
    print(f"{'spawn → answer (median ms)':32} {'initialize':>11} {'tools/list':>11} {'init / SDK':>11}")
    for name in servers:
        print(f"{name:32} {med(init[name]):11.1f} {med(listed[name]):11.1f} {med(init[name]) / base:11.2f}")
    pass_wall, pass_cpu = med(walls["python -c pass"]), med(cpus["python -c pass"])
    print(f"{'command (median)':32} {'wall ms':>11} {'CPU ms':>11} {'CPU / pass':>11}")
    for name in [*commands, FIRST]:
        print(
            f"{name:32} {med(walls[name]):11.1f} {med(cpus[name]):11.1f} {med(cpus[name]) / pass_cpu:11.2f}"
        )
    warm = med(init["tether mcp (cache warm)"])
    print(
        f"budgets: initialize ≤ 150 ms → {warm:.0f} ms; ≤ 1.5 × SDK → {warm / base:.2f}; "
        f"--version < 100 ms → {med(walls['tether --version']):.0f} ms (python -c pass {pass_wall:.0f} ms)"
    )
    others = ("tether exec -- true", "tether shell list", "tether audit verify", "tether vault list")
    timed = ", ".join(f"{name[7:]} {med(walls[name]):.0f} ms" for name in others)
    print(f"         other commands < 100 ms → {timed}; the first of a home {med(walls[FIRST]):.0f} ms")


if __name__ == "__main__":
    main()
