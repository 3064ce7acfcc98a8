"""Rendering what a program printed never holds up another conversation's call.

One ``tether serve`` process (in-process here: the test's clients share its event loop, so a
render on the loop would stall them too), two conversations over streamable HTTP: the first searches
the log of a shell that printed 1 MB lines rewritten with ``\\r`` (seconds of rendering), the
second keeps calling meanwhile. The relation is what counts, not a duration: the second
conversation's calls complete, many of them, while the first call is still being served."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, serving
from shell_harness import call

from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.tools.catalog import build_catalog

_FLOOD = (
    "python3 -c \"import sys; [sys.stdout.write('y' * 1000000 + '\\r' + 'line %d' % n + '\\n') "
    'for n in range(24)]"'
)


@pytest.mark.timeout(300)
async def test_a_huge_render_does_not_delay_another_conversation(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url, http_client(url) as first, http_client(url) as second:
            _, data = await call(first, "shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            shell = data["tasks"][0]["shell"]
            target = {"sessions": shell}
            run = {"kind": "run", "command": _FLOOD}
            _, data = await call(
                first,
                "shell_run",
                {"tasks": [{"target": target, "action": run, "wait": {"kind": "exit", "timeoutMs": 120000}}]},
            )
            assert data["tasks"][0]["exitCode"] == 0
            history = {"tasks": [{"target": target, "action": {"kind": "read", "search": "line 2[0-9]"}}]}
            big = asyncio.ensure_future(call(first, "shell_read", history))
            completed_meanwhile = 0
            while not big.done():
                _, state = await call(second, "shell_state", {"scope": "*"})
                assert [row["shell"] for row in state["shells"]] == [shell]
                if not big.done():
                    completed_meanwhile += 1
            _, data = await big
            lines = data["tasks"][0]["lines"]
            assert lines and lines[0].startswith("4 matches"), data  # the command line holds none of them
            # On the loop, the render would have let at most the call already in flight through.
            assert completed_meanwhile >= 5, completed_meanwhile
    finally:
        await catalog.aclose()
