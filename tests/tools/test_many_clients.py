"""Many conversations at once, each opening a shell and running in it, all succeed.

Thirty concurrent clients (the official SDK over streamable HTTP, one conversation each) against
one server: every ``shell_open`` returns a shell that reads its first line, every ``shell_run`` in
it returns its exit status. ``bench/clients.py`` runs the same for 200 clients under
``stress-ng --cpu 2`` (docs/development.md has the figure)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, serving

from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.tools.catalog import build_catalog

CLIENTS = 30


async def _open_and_run(url: str, n: int) -> str:
    async with http_client(url) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        task: dict[str, Any] = (opened.structured_content or {})["tasks"][0]
        if not task["ok"]:
            return f"open {task['errorCode']}: {task['error']}"
        run = {"kind": "run", "command": f"echo client-{n}"}
        ran = await client.call_tool(
            "shell_run",
            {"tasks": [{"target": {"sessions": task["shell"]}, "action": run, "wait": {"kind": "exit"}}]},
        )
        out: dict[str, Any] = (ran.structured_content or {})["tasks"][0]
        if out.get("exitCode") == 0 and out["lines"][0] == f"client-{n}":
            return "ok"
        return f"run {out.get('errorCode')}: {out.get('error') or out.get('lines')}"


@pytest.mark.timeout(300)
async def test_thirty_clients_open_and_run_at_once(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text(f"[sessions]\nmax_sessions = {CLIENTS + 2}\n")
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url:
            results = await asyncio.gather(*(_open_and_run(url, n) for n in range(CLIENTS)))
        assert [r for r in results if r != "ok"] == []
    finally:
        await catalog.aclose()
