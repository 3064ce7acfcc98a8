"""The persistent-shell tools over ``tether serve``'s streamable HTTP front door: two conversations."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, serving
from shell_harness import call, text_of

from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.tools.catalog import build_catalog


async def test_two_http_conversations_see_mine_and_others(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url, http_client(url) as first, http_client(url) as second:
            _, data = await call(
                first, "shell_open", {"tasks": [{"action": {"kind": "open", "label": "one"}}]}
            )
            shell = data["tasks"][0]["shell"]
            args = {
                "tasks": [{"action": {"kind": "run", "command": "echo over-http"}, "wait": {"kind": "exit"}}]
            }
            _, data = await call(first, "shell_run", args)
            assert data["tasks"][0]["lines"] == ["over-http"] and data["tasks"][0]["exitCode"] == 0
            _, data = await call(second, "shell_state", {"scope": "*"})
            assert [(r["shell"], r["owner"]) for r in data["shells"]] == [(shell, "others")]
            result = await second.call_tool("shell_run", args)  # `mine` is empty for the second one
            assert "has no live shell" in text_of(result)
            _, data = await call(
                second,
                "shell_read",
                {
                    "tasks": [
                        {"target": {"sessions": shell}, "action": {"kind": "read", "search": "over-http"}}
                    ]
                },
            )
            assert data["tasks"][0]["lines"][0].startswith("2 matches")  # the echoed command and its output
    finally:
        await catalog.aclose()
