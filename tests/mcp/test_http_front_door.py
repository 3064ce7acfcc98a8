"""The MCP front door over streamable HTTP, driven by the official SDK client (raw HTTP for the guards)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_harness import (
    RAW_HEADERS,
    RAW_INIT,
    TOKEN,
    Probe,
    http_client,
    raw_session,
    rpc_payload,
    serving,
    text_of,
)

from hang import HANG_S
from tether.mcp.http import session_answer, session_error_text
from tether.mcp.server import McpFrontDoor
from tether.mcp.wire import INVALID_REQUEST
from tether.tools.bash import ToolAborted
from tether.tools.registry import CallContext, ResourceInfo, ToolDef, ToolResult


async def _aborts(arguments: Any, ctx: CallContext) -> ToolResult:
    # An abort that is not this request's cancellation (e.g. a caller's abort signal).
    raise ToolAborted("the caller's abort signal fired")


async def test_tools_list_call_and_error_mapping(probe: Probe) -> None:
    front = McpFrontDoor(probe.registry(), instructions="use the tools")
    async with serving(front) as url, http_client(url) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["echo", "refuse", "crash", "hang"]
        echo = next(t for t in listed.tools if t.name == "echo")
        assert echo.output_schema is not None and echo.output_schema["required"] == ["echo"]

        ok = await client.call_tool("echo", {"word": "hi"})
        assert not ok.is_error and text_of(ok) == "echo: hi" and ok.structured_content == {"echo": "hi"}

        refused = await client.call_tool("refuse", {})
        assert refused.is_error and text_of(refused) == "INVALID_ARGUMENT: field 'word' must be one of: a, b"

        crashed = await client.call_tool("crash", {})
        assert crashed.is_error and text_of(crashed).startswith("INTERNAL: tool crash failed unexpectedly")
        assert "secret internal detail" not in text_of(crashed)

        front.registry.add(
            ToolDef(name="abort", description="Aborted.", input_schema={"type": "object"}, handler=_aborts)
        )
        aborted = await client.call_tool("abort", {})
        assert aborted.is_error and text_of(aborted) == "TOOL_ABORTED: the caller's abort signal fired"

        unknown = await client.call_tool("nope", {})
        assert unknown.is_error and "unknown tool 'nope'" in text_of(unknown) and "echo" in text_of(unknown)

        again = await client.call_tool("echo", {"word": "still serving"})
        assert text_of(again) == "echo: still serving"


async def test_each_session_is_its_own_conversation(probe: Probe) -> None:
    front = McpFrontDoor(probe.registry())
    async with serving(front) as url:
        async with http_client(url) as first:
            await first.call_tool("echo", {"word": "a"})
            await first.call_tool("echo", {"word": "b"})
        async with http_client(url) as second:
            await second.call_tool("echo", {"word": "c"})
    assert probe.actors[0] == probe.actors[1] != probe.actors[2]
    assert all(actor.startswith("conv-") for actor in probe.actors)


async def test_list_changed_reaches_a_connected_client(probe: Probe) -> None:
    registry = probe.registry()
    front = McpFrontDoor(registry)
    changed = anyio.Event()

    def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with serving(front) as url, http_client(url, on_message=on_message) as client:
        await client.list_tools()
        registry.add(
            ToolDef(
                name="late", description="Added later.", input_schema={"type": "object"}, handler=probe.echo
            )
        )
        with anyio.fail_after(HANG_S):
            await changed.wait()
        assert "late" in [t.name for t in (await client.list_tools()).tools]


async def test_cancelled_call_cancels_the_handler_and_server_keeps_serving(probe: Probe) -> None:
    front = McpFrontDoor(probe.registry())
    async with serving(front) as url, http_client(url) as client:
        async with anyio.create_task_group() as tg:

            async def call_hang() -> None:
                await client.call_tool("hang", {})

            tg.start_soon(call_hang)
            with anyio.fail_after(HANG_S):
                await probe.started.wait()
            tg.cancel_scope.cancel()
        with anyio.fail_after(HANG_S):
            await probe.cancelled.wait()
        assert text_of(await client.call_tool("echo", {"word": "after"})) == "echo: after"


async def test_guards_token_host_origin_and_session_ids(probe: Probe) -> None:
    front = McpFrontDoor(probe.registry())
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serving(front) as url, httpx2.AsyncClient() as http:
        missing = await http.post(url, json=RAW_INIT, headers=RAW_HEADERS)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.post(url, json=RAW_INIT, headers={**RAW_HEADERS, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        host = await http.post(url, json=RAW_INIT, headers={**RAW_HEADERS, **auth, "Host": "evil.example:80"})
        assert host.status_code == 421
        origin = await http.post(
            url, json=RAW_INIT, headers={**RAW_HEADERS, **auth, "Origin": "http://evil.example"}
        )
        assert origin.status_code == 403

        opened = await http.post(
            url, json=RAW_INIT, headers={**RAW_HEADERS, **auth, "Origin": "http://localhost:3000"}
        )
        assert opened.status_code == 200
        session_id = opened.headers["mcp-session-id"]
        assert len(session_id) >= 64 and int(session_id, 16) >= 0  # 256 random bits, hex

        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        proto = {"MCP-Protocol-Version": "2025-11-25"}
        no_session = await http.post(url, json=ping, headers={**RAW_HEADERS, **auth, **proto})
        assert no_session.status_code == 400
        unknown = await http.post(
            url, json=ping, headers={**RAW_HEADERS, **auth, **proto, "mcp-session-id": "f" * 64}
        )
        assert unknown.status_code == 404

        modern = await http.post(
            url, json=ping, headers={**RAW_HEADERS, **auth, "MCP-Protocol-Version": "2026-07-28"}
        )
        assert modern.status_code == 400
        assert json.loads(modern.text)["error"]["data"]["supported"][-1] == "2025-11-25"


async def test_a_missing_or_unknown_session_id_is_answered_with_the_cause_and_the_fix(probe: Probe) -> None:
    # The SDK answered "Session not found" and "Bad Request: Missing session ID": a client that
    # shows the body (the TypeScript SDK does) told its user neither why nor what to do.
    front = McpFrontDoor(probe.registry())
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with serving(front) as url, httpx2.AsyncClient() as http:
        session = await raw_session(http, url)
        no_id = {key: value for key, value in session.items() if key != "mcp-session-id"}
        ended = dict(session)
        assert (await http.delete(url, headers=ended)).status_code == 200
        never = {**session, "mcp-session-id": "f" * 64}
        answers = []
        for headers in (no_id, ended, never):
            answers.append(await http.post(url, json=ping, headers=headers))
            answers.append(await http.get(url, headers=headers))
            answers.append(await http.delete(url, headers=headers))
        for answer in answers:
            error = json.loads(answer.text)["error"]
            assert error["code"] == INVALID_REQUEST and "initialize" in error["message"], answer.text
        assert [answer.status_code for answer in answers] == [400] * 3 + [404] * 6
        assert all(
            json.loads(a.text)["error"]["message"].startswith("missing session id") for a in answers[:3]
        )
        assert all(
            json.loads(a.text)["error"]["message"].startswith("session not found") for a in answers[3:]
        )
        # The server serves on.
        again = await raw_session(http, url)
        assert rpc_payload(await http.post(url, json=ping, headers=again))["result"] == {}


def test_a_full_session_table_is_answered_with_the_fix() -> None:
    full = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Too many open sessions"}}'
    answer = session_answer(503, full)
    assert answer is not None and answer["error"] == {"code": -32603, "message": session_error_text("full")}
    assert "DELETE" in session_error_text("full")
    assert session_answer(503, b"not json") is None
    assert (
        session_answer(400, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
        is None
    )


class _Shells:
    """A resource source with one readable resource."""

    uri = "tether://shell/dsh-abc123"
    template = ResourceInfo(uri="tether://shell/{shell}", name="shell screen", description="a shell's screen")

    def handles(self, uri: str) -> bool:
        return uri.startswith("tether://shell/")

    async def list(self, ctx: CallContext) -> list[ResourceInfo]:
        return [ResourceInfo(uri=self.uri, name="dsh-abc123", description="a shell")]

    async def read(self, uri: str, ctx: CallContext) -> str:
        return f"screen of {uri} for {ctx.actor.split('-')[0]}"


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_resources_list_read_subscribe_and_updates(probe: Probe) -> None:
    registry = probe.registry()
    registry.add_resource_source(_Shells())
    notifiers: list[Any] = []

    async def grab(arguments: Any, ctx: CallContext) -> ToolResult:
        notifiers.append(ctx.notifier)
        return ToolResult(text="ok")

    registry.add(
        ToolDef(name="grab", description="Keep the notifier.", input_schema={"type": "object"}, handler=grab)
    )
    updated = anyio.Event()
    logged: list[Any] = []

    def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.set()
        if isinstance(message, types.LoggingMessageNotification):
            logged.append(message.params.data)

    front = McpFrontDoor(registry)
    async with serving(front) as url, http_client(url, on_message=on_message) as client:
        listed = await client.list_resources()
        assert [str(r.uri) for r in listed.resources] == [_Shells.uri]
        templates = await client.list_resource_templates()  # was "Method not found"
        assert [(t.uri_template, t.name) for t in templates.resource_templates] == [
            ("tether://shell/{shell}", "shell screen")
        ]
        read = await client.read_resource(_Shells.uri)
        assert isinstance(read.contents[0], types.TextResourceContents)
        assert read.contents[0].text == f"screen of {_Shells.uri} for conv"
        await client.call_tool("grab", {})
        notifier = notifiers[0]
        await notifier.resource_updated(_Shells.uri)  # not subscribed yet: dropped
        await client.subscribe_resource(_Shells.uri)
        await notifier.log("info", "tether.test", {"hello": 1})
        await notifier.resource_updated(_Shells.uri)
        with anyio.fail_after(HANG_S):
            await updated.wait()
        assert {"hello": 1} in logged
        try:
            await client.read_resource("tether://nothing/here")
        except Exception as exc:  # the SDK raises MCPError for a JSON-RPC error
            assert "unknown resource" in str(exc)
        else:
            raise AssertionError("reading an unknown resource must fail")


async def test_a_body_over_the_limit_is_a_named_error_for_the_client(probe: Probe) -> None:
    # The SDK answers a body over 4 MiB with a plain-text 413, which its client turned into
    # "Server returned an error response": nothing said what was wrong or what to do.
    front = McpFrontDoor(probe.registry())
    async with serving(front) as url, http_client(url) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("echo", {"word": "x" * (5 * 1024 * 1024)})
        message = str(info.value)
        assert "the request body is over the limit of 4 MiB" in message, message
        assert "send large input in pieces" in message
        ok = await client.call_tool("echo", {"word": "a"})  # the session goes on
        assert text_of(ok) == "echo: a"
