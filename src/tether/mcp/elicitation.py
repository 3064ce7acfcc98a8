"""The person at an MCP client, reached through elicitation during one tool call.

Invariant: a tool's ``CallContext.person`` is an ``ElicitationChannel`` only when the client
declared the elicitation capability for forms; the question rides the call's own request
(``related_request_id``, so over streamable HTTP it arrives on that request's stream), and it
gets exactly one ``PersonReply``: approved or denied (the form's ``approve``, and an optional
``reason`` in the person's words), cancelled (the person dismissed it), or timeout (no answer in
``timeout_s``; the request is cancelled). A client that cannot take the request raises
``PersonUnavailable``, and the question goes to the panel's queue instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from tether.approvals import MAX_REASON_CHARS, PersonReply, PersonUnavailable

SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Allow",
            "description": "Allow it (this once, for this command or shell).",
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "Optional: why (kept in tether's audit log).",
            "maxLength": MAX_REASON_CHARS,
        },
    },
    "required": ["approve"],
}


def supports_forms(capabilities: types.ClientCapabilities | None) -> bool:
    """Form elicitation: declared as ``elicitation.form``, or as a bare ``elicitation`` (the form
    of the capability before modes existed)."""
    found = capabilities.elicitation if capabilities is not None else None
    return found is not None and (found.form is not None or found.url is None)


# Sends one form elicitation (its message, its schema) to the client and returns the answer: the
# request's own session on the SDK's path (``ServerSession.elicit_form`` with the call's request
# id), the connection itself where only one stream exists (``elicit_over``, stdio's direct calls).
Asker = Callable[[str, dict[str, Any]], Awaitable[types.ElicitResult]]


def elicit_over(connection: Any) -> Asker:
    """An ``Asker`` on the connection's own stream: on stdio, where every message shares one
    stream, the same request on the wire as the request's session would send."""

    async def ask(message: str, schema: dict[str, Any]) -> types.ElicitResult:
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
        )
        result: types.ElicitResult = await connection.send_request(request)
        return result

    return ask


class ElicitationChannel:
    """Asks the person at one MCP client during one request (see the module docstring)."""

    def __init__(self, ask: Asker, *, who: str) -> None:
        self._ask = ask
        self._who = who

    @property
    def who(self) -> str:
        return self._who

    async def confirm(self, message: str, *, timeout_s: float) -> PersonReply:
        result: types.ElicitResult | None = None
        with anyio.move_on_after(timeout_s):
            try:
                result = await self._ask(message, SCHEMA)
            except MCPError as exc:
                raise PersonUnavailable(f"elicitation failed: {exc}") from exc
        if result is None:
            return PersonReply(outcome="timeout")
        if result.action == "cancel":
            return PersonReply(outcome="cancelled")
        content = result.content or {}
        reason = content.get("reason")
        words = reason.strip() if isinstance(reason, str) else ""
        if result.action == "accept" and content.get("approve") is True:
            return PersonReply(outcome="approved", reason=words)
        return PersonReply(outcome="denied", reason=words)


def person_name(capabilities_owner: Any, conversation: str) -> str:
    """Who answers, for the audit log: the person at the client, named by the client's name."""
    params = getattr(capabilities_owner, "client_params", None)
    info = getattr(params, "client_info", None)
    client = getattr(info, "name", None) or "the MCP client"
    return f"person at {client} ({conversation})"
