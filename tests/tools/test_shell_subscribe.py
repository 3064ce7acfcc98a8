"""Subscriptions deliver new output as MCP notifications (resource update + log message)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from shell_harness import call, run, shell_client

from hang import HANG_S


# tether serves the handshake era, where resources/subscribe is part of the protocol; the SDK
# client warns because the 2026-07-28 era dropped it.
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_watch_on_open_and_unsubscribe(tether_home: Path) -> None:
    logged: list[Any] = []
    updated: list[str] = []
    got = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)
        if any("sub-hello" in line for line in params.data.get("lines", [])):
            got.set()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    async with shell_client(tether_home, logging_callback=on_log, message_handler=on_message) as client:
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "watch": True}}]})
        shell = data["tasks"][0]["shell"]
        uri = f"tether://shell/{shell}"
        await client.subscribe_resource(uri)
        resources = await client.list_resources()
        assert uri in [str(r.uri) for r in resources.resources]
        templates = await client.list_resource_templates()
        (template,) = templates.resource_templates
        assert template.uri_template.replace("{shell}", shell) == uri
        await run(client, shell, "echo sub-hello")
        with anyio.fail_after(HANG_S):
            await got.wait()
        assert uri in updated
        assert all("__tb" not in str(entry) for entry in logged)
        screen = await client.read_resource(uri)
        assert "sub-hello" in str(screen.contents[0])
        # subscribing again is idempotent; unsubscribe stops it
        text, _ = await call(
            client,
            "shell_read",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "subscribe"}}]},
        )
        assert "already subscribed" in text
        text, _ = await call(
            client,
            "shell_read",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "unsubscribe"}}]},
        )
        assert "unsubscribed" in text
        # A shell that does not exist, or an id that is none, is refused, not subscribed to in silence.
        for missing, code in (
            ("tether://shell/dsh-zzzzzz", "NOT_FOUND"),
            ("tether://shell/../x", "INVALID_ARGUMENT"),
        ):
            with pytest.raises(MCPError) as refused:
                await client.subscribe_resource(missing)
            assert refused.value.error.code == -32602 and refused.value.error.message.startswith(f"{code}: ")
