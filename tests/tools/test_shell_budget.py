"""Every persistent-shell result has a byte budget ([sessions] result_max_bytes, 64 KB by
default): one huge line, a long history or a search of it come back bounded, say what was cut and
how to read the rest, and the server's memory stays bounded while it reads them."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
from shell_harness import call, open_shell, read, run, shell_client

from hang import HANG_MS

LINE_MB = 24


def _size(result: dict[str, object]) -> int:
    return len(json.dumps(result).encode())


async def test_a_huge_line_a_history_and_a_search_stay_within_the_budget(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        _, state = await call(client, "shell_state", {"verbose": True})
        server = psutil.Process(int(state["diagnostics"]["pid"]))
        rss_before = server.memory_info().rss
        command = f"head -c {LINE_MB * 1_000_000} /dev/zero | tr '\\0' x; echo; seq 1 5000"
        out = await run(client, shell, command, wait={"kind": "exit", "timeoutMs": 120_000})
        assert out["exitCode"] == 0
        assert _size(out) < 70_000, _size(out)
        assert out["lines"][-1] == "5000"
        assert out["lines"][0].startswith("[") and "dropped" in out["lines"][0], out["lines"][:2]
        history = await read(client, shell, {"mode": "history"})
        assert _size(history) < 70_000, _size(history)
        assert "5000" in history["lines"]
        found = await read(client, shell, {"search": "x{1000}"})
        assert _size(found) < 70_000, _size(found)
        assert found["lines"][0].startswith("1 matches"), found["lines"][:3]
        since = await read(client, shell, {"mode": "since"})
        assert _size(since) < 70_000
        growth = server.memory_info().rss - rss_before
        assert growth < 96 * 2**20, f"server RSS grew by {growth / 2**20:.0f} MiB"


async def test_the_budget_is_configurable(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text("[sessions]\nresult_max_bytes = 4096\n")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(client, shell, "seq 1 3000")
        text = "\n".join(out["lines"])
        assert len(text.encode()) <= 4096 and out["lines"][-1] == "3000"
        assert "result_max_bytes" in text and "shell_read mode=history" in text


async def test_in_one_call_a_shell_over_the_budget_is_cut_and_one_within_it_is_whole(
    tether_home: Path,
) -> None:
    (tether_home / "config.toml").write_text("[sessions]\nresult_max_bytes = 4096\n")
    async with shell_client(tether_home) as client:
        long, short = await open_shell(client), await open_shell(client)
        wait = {"kind": "exit", "timeoutMs": HANG_MS}
        tasks = [
            {"target": {"sessions": long}, "action": {"kind": "run", "command": "seq 1 3000"}, "wait": wait},
            {"target": {"sessions": short}, "action": {"kind": "run", "command": "seq 1 3"}, "wait": wait},
        ]
        _, data = await call(client, "shell_run", {"tasks": tasks, "concurrency": 2})
        cut, whole = data["tasks"]
        assert cut["shell"] == long and whole["shell"] == short
        assert len("\n".join(cut["lines"]).encode()) <= 4096 and cut["lines"][-1] == "3000"
        assert "result_max_bytes" in "\n".join(cut["lines"])
        assert whole["lines"] == ["1", "2", "3"] and whole["exitCode"] == 0
