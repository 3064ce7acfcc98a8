"""How much a huge render delays another call of the same server (issue 17: "a few milliseconds").

One ``tether mcp`` through the official MCP client over stdio, two shells. Shell A prints 24 lines
of 1 MB each rewritten with ``\\r`` (a render of seconds); then, while one call searches A's log,
the same conversation keeps running ``echo hi`` in shell B. Printed: B's round trip with nothing
else going on (baseline, same run) and during the search (p50, max), the ratio, and how many calls
completed during the search. No assertions: see the README for the budget.

Run: .venv/bin/python bench/delay.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

TETHER = str(Path(sys.executable).parent / "tether")
FLOOD = (
    "python3 -c \"import sys; [sys.stdout.write('y' * 1000000 + '\\r' + 'line %d' % n + '\\n') "
    'for n in range(24)]"'
)


def _run(shell: str, command: str) -> dict[str, Any]:
    return {
        "tasks": [
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": command},
                "wait": {"kind": "exit", "timeoutMs": 120000},
            }
        ]
    }


async def one_round(scratch: Path) -> tuple[list[float], list[float], float]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(scratch / "home"),
        "TETHER_HOME": str(scratch / "tether"),
        "TMUX_TMPDIR": str(scratch / "tmux"),
    }
    for d in ("home", "tmux"):
        (scratch / d).mkdir(exist_ok=True)
    async with Client(StdioServerParameters(command=TETHER, args=["mcp"], env=env)) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}] * 2})
        assert opened.structured_content is not None
        flood, other = (t["shell"] for t in opened.structured_content["tasks"])
        await client.call_tool("shell_run", _run(flood, FLOOD))
        await client.call_tool("shell_run", _run(other, "true"))

        async def echo() -> float:
            start = time.perf_counter()
            await client.call_tool("shell_run", _run(other, "echo hi"))
            return (time.perf_counter() - start) * 1000

        quiet = [await echo() for _ in range(30)]
        read = {"kind": "read", "search": "line 2[0-9]"}
        search = {"tasks": [{"target": {"sessions": flood}, "action": read}]}
        start = time.perf_counter()
        big = asyncio.ensure_future(client.call_tool("shell_read", search))
        during: list[float] = []
        while not big.done():
            ms = await echo()
            if not big.done():
                during.append(ms)
        await big
        return quiet, during, (time.perf_counter() - start) * 1000


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    now = f"{datetime.datetime.now():%Y-%m-%d %H:%M}"
    print(f"bench/delay.py  {now}  load average {load}  rounds {args.rounds}")
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="tether-delay-") as tmp:
            quiet, during, search_ms = asyncio.run(one_round(Path(tmp)))
            subprocess.run(["tmux", "-S", f"{tmp}/tether/tmux.sock", "kill-server"], capture_output=True)
        q = statistics.median(quiet)
        if not during:
            print(f"round {n + 1}: search {search_ms:.0f} ms; echo alone p50 {q:.1f} ms; none completed")
            continue
        d = statistics.median(during)
        print(
            f"round {n + 1}: search {search_ms:.0f} ms; echo alone p50 {q:.1f} ms; during the search "
            f"p50 {d:.1f} ms (×{d / q:.2f}), max {max(during):.1f} ms, {len(during)} calls meanwhile"
        )


if __name__ == "__main__":
    main()
