"""The stdio wire under the SDK: stray output, server → client requests, notifications, cancel."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp_harness import text_of
from stdio_driver import source_env

pytestmark = pytest.mark.timeout(60)

PROBE = str(Path(__file__).with_name("stdio_probe_server.py"))


def _params(markers: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[PROBE, str(markers)], env=source_env())


async def test_stray_writes_to_fd_1_never_reach_the_wire(tmp_path: Path) -> None:
    faults: list[Exception] = []

    async def handler(message: IncomingMessage) -> None:
        if isinstance(message, Exception):  # a line on stdout that is not an MCP message
            faults.append(message)

    async with Client(_params(tmp_path), message_handler=handler) as client:
        for _ in range(3):
            result = await client.call_tool("noise", {})
            assert not result.is_error and text_of(result) == "made noise"
        assert (await client.list_tools()).tools
    assert faults == []


async def test_server_to_client_requests_and_log_messages_pass_the_wire(tmp_path: Path) -> None:
    logged: list[types.LoggingMessageNotificationParams] = []

    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams) and "network" in params.message
        return types.ElicitResult(action="accept", content={"allow": True})

    async def roots(_ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async with Client(
        _params(tmp_path), elicitation_callback=elicit, list_roots_callback=roots, logging_callback=on_log
    ) as client:
        answer = json.loads(text_of(await client.call_tool("ask", {})))
        assert answer == {"action": "accept", "content": {"allow": True}, "roots": ["file:///work/project"]}
        assert text_of(await client.call_tool("log", {})) == "logged"
        assert [(p.level, p.logger, p.data) for p in logged] == [("warning", "probe", {"said": "hello"})]


async def test_a_cancelled_call_is_cancelled_in_the_handler(tmp_path: Path) -> None:
    started, cancelled = anyio.Event(), anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        {"hang started": started, "hang cancelled": cancelled}[str(params.data)].set()

    async with Client(_params(tmp_path), logging_callback=on_log) as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "hang", {})
                await started.wait()
                tg.cancel_scope.cancel()  # the client sends notifications/cancelled
            await cancelled.wait()
        assert text_of(await client.call_tool("log", {})) == "logged"  # and it keeps serving
