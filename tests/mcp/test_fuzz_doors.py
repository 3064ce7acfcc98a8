"""Fuzzed tool calls through the MCP doors, with the official SDK client: ``tether mcp`` over stdio
(a real subprocess) and the streamable HTTP app of ``tether serve``.

Every answer is a well-formed ``CallToolResult``: an error whose text starts with a stable code
(or whose failed tasks each carry one), or a success matching the tool's ``outputSchema``; never
``INTERNAL``, never a traceback, in the answer or in the server's log and stderr. The server
answers a plain call every few cases and at the end, its descriptors do not grow with the calls,
and once the conversation ends nothing it started is left: no job's process, no shell. The
arguments are ``tests/tools/fuzz_args.py``'s (what the SDK client cannot send — a non-object, a
lone surrogate, NaN — is sent as raw lines by ``test_malformed_input.py`` instead).
"""

from __future__ import annotations

import logging
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp_harness import http_client, serving, text_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from fuzz_args import Refs, case, is_stable_code, sendable
from shell_harness import params

from proc_probe import alive_with, mcp_children, unique_sleep_arg, wait_until
from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.tools.catalog import build_catalog

pytestmark = pytest.mark.timeout(300)


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    return await client.call_tool(tool, arguments)


async def _open(client: Client) -> str:
    opened = await _call(client, "shell_open", {"tasks": [{"action": {"kind": "open"}}]})
    assert opened.structured_content is not None
    shell = opened.structured_content["tasks"][0]["shell"]
    assert isinstance(shell, str)
    return shell


async def _still_serving(client: Client, refs: Refs) -> None:
    """A plain call answers; shells beyond three are closed (a fuzzed open may start several)."""
    echoed = await _call(client, "bash", {"command": "echo serving", "description": "f"})
    assert text_of(echoed) == "serving"
    state = await _call(client, "shell_state", {"scope": "*"})
    assert state.structured_content is not None
    live = [row["shell"] for row in state.structured_content["shells"]]
    refs.ended += [s for s in refs.live if s not in live]
    refs.live[:] = [s for s in refs.live if s in live]
    for shell in live[3:]:
        await _call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
    if not refs.live:
        refs.live.append(await _open(client))


async def _fuzz(
    client: Client, *, seed: int, cases: int, sleeper: str, checkpoint: Callable[[], None] = lambda: None
) -> dict[str, int]:
    """``cases`` fuzzed calls of the listed tools, each answer checked; what came back, counted.
    ``checkpoint`` runs after every check that the server still serves."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    refs = Refs(live=[await _open(client), await _open(client)])
    ended = await _open(client)
    await _call(
        client, "shell_manage", {"tasks": [{"target": {"sessions": ended}, "action": {"kind": "close"}}]}
    )
    refs.ended.append(ended)
    for command, into in (("true", refs.jobs_done), (f"sleep {sleeper}", refs.jobs_live)):
        job = await _call(client, "bash", {"command": command, "description": "f", "run_in_background": True})
        assert job.structured_content is not None
        into.append(job.structured_content["jobId"])
    rnd = random.Random(seed)
    answered: dict[str, int] = {}
    for number in range(cases):
        tool = rnd.choice(sorted(tools))
        arguments = case(tool, rnd, refs, nan=False)
        if not sendable(arguments):
            continue
        where = f"case {number}: {tool} {str(arguments)[:300]}"
        result = await _call(client, tool, arguments)
        text = text_of(result)
        assert "Traceback" not in text, where
        data = result.structured_content
        tasks = data.get("tasks") if data is not None else None
        if result.is_error and isinstance(tasks, list):
            for task in tasks:
                assert task.get("error") is None or is_stable_code(task.get("errorCode")), f"{where}: {task}"
            kind = "task errors"
        elif result.is_error:
            kind = text.split(":", 1)[0]
            assert is_stable_code(kind), f"{where}: {text[:500]}"
        else:
            schema = tools[tool].output_schema
            if schema is not None:
                jsonschema.validate(data, schema)
            kind = "ok"
            if tool == "shell_open" and isinstance(tasks, list):
                refs.live += [t["shell"] for t in tasks if t.get("shell")]
        answered[kind] = answered.get(kind, 0) + 1
        if number % 25 == 24:
            await _still_serving(client, refs)
            checkpoint()
    await _still_serving(client, refs)
    checkpoint()
    state = await _call(client, "shell_state", {"scope": "*"})
    assert state.structured_content is not None
    for row in state.structured_content["shells"]:
        close = {"tasks": [{"target": {"sessions": row["shell"]}, "action": {"kind": "close"}}]}
        await _call(client, "shell_manage", close)
    return answered


def _shells_left(home: Path) -> list[str]:
    listed = subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [name for name in listed.stdout.split() if name.startswith("dsh-")]


def _fd_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


async def test_stdio_answers_fuzzed_calls_with_coded_errors_and_keeps_serving(tether_home: Path) -> None:
    sleeper = unique_sleep_arg()
    stderr_path = tether_home / "server-stderr.txt"
    with stderr_path.open("w") as stderr:
        async with Client(stdio_client(params(tether_home, "conv-fuzz"), errlog=stderr)) as client:
            [server] = mcp_children()
            fds: list[int] = []
            answered = await _fuzz(
                client,
                seed=20261207,
                cases=150,
                sleeper=sleeper,
                checkpoint=lambda: fds.append(_fd_count(server.pid)),
            )
    # From the first checkpoint (25 calls in: the tmux control client, the render worker, the
    # database's connections have started) to the last: a descriptor kept per call would be
    # dozens; a couple come and go with the log followers of the shells open at the time.
    assert fds[-1] <= fds[0] + 3, fds
    assert answered.get("ok", 0) > 5 and answered.get("INVALID_ARGUMENT", 0) > 50, answered
    assert wait_until(lambda: not alive_with(sleeper)), "a job outlived its conversation"
    assert _shells_left(tether_home) == []
    logs = "".join(p.read_text(errors="replace") for p in (tether_home / "logs").glob("*.log"))
    assert "Traceback" not in stderr_path.read_text() + logs


async def test_http_answers_fuzzed_calls_with_coded_errors_and_keeps_serving(
    tether_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sleeper = unique_sleep_arg()
    catalog = build_catalog(load_config(tether_home))
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        with caplog.at_level(logging.WARNING, logger="tether"):
            async with serving(door) as url, http_client(url) as client:
                answered = await _fuzz(client, seed=1207, cases=100, sleeper=sleeper)
    finally:
        await catalog.aclose()
    assert answered.get("ok", 0) > 3 and answered.get("INVALID_ARGUMENT", 0) > 30, answered
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not failures, [r.getMessage() for r in failures]
    assert wait_until(lambda: not alive_with(sleeper)), "a job outlived its conversation"
    assert _shells_left(tether_home) == []
