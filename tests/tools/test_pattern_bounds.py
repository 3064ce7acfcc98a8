"""A pattern the model writes can backtrack for years on one short line (``(a+)+b`` on forty
``a``s and a ``!``). It never runs in the server: a ``wait: match`` ends at its deadline saying
why, a ``read.search`` is refused once its time is spent, and every other conversation is served
meanwhile.

One ``tether serve`` in-process (the clients share its event loop, so a pattern tried on the loop
would stall them too), two conversations over streamable HTTP. The relation is what counts, not a
duration: the second conversation's calls complete while the first call is still being served.

The pattern must match no prefix of the output either: a wait tries it on output as it arrives,
and ``(a+)+$`` matched the forty ``a``s when ``!`` came in a later read (a clean-clone run under
load)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, serving
from shell_harness import call

from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.shells import views
from tether.tools.catalog import build_catalog

EVIL = "(a+)+b"
PRINT = "printf 'a%.0s' {1..40}; echo '!'"


async def _served_meanwhile(first: asyncio.Future[Any], second: Any) -> int:
    completed = 0
    while not first.done():
        await call(second, "shell_state", {"scope": "*"})
        if not first.done():
            completed += 1
    return completed


@pytest.mark.timeout(300)
async def test_a_catastrophic_pattern_never_holds_the_server(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "SEARCH_WITHIN_S", 2.0)
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url, http_client(url) as first, http_client(url) as second:
            _, data = await call(first, "shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            target = {"sessions": data["tasks"][0]["shell"]}
            wait = {"kind": "match", "pattern": EVIL, "timeoutMs": 2000}
            task = {"target": target, "action": {"kind": "run", "command": PRINT}, "wait": wait}
            run = asyncio.ensure_future(call(first, "shell_run", {"tasks": [task]}))
            assert await _served_meanwhile(run, second) >= 2
            text, data = await run
            result = data["tasks"][0]
            assert result["met"] is False and result["exitCode"] == 0, text
            assert "the pattern did not finish on the output" in text and "(a+)+" in text, text

            read = {"target": target, "action": {"kind": "read", "search": EVIL}}
            search = asyncio.ensure_future(call(first, "shell_read", {"tasks": [read]}))
            assert await _served_meanwhile(search, second) >= 2
            text, data = await search
            assert f"read.search '{EVIL}' did not finish" in text and "simplify it" in text, text

            # A plain pattern on the same output still matches, and the server still serves.
            task["wait"] = {"kind": "match", "pattern": "a{40}!", "timeoutMs": 60000}
            _, data = await call(first, "shell_run", {"tasks": [task]})
            assert data["tasks"][0]["met"] is True, data
    finally:
        await catalog.aclose()
