"""``tools/call`` on the stdio wire, answered beside the SDK: the request's dict in, its response out.

The SDK's path for a request (its models validating the envelope and the params, a dispatcher
task, a per-request session and context, the middleware chain, the result's model and its
per-version serialisation) cost about 0.3 ms of every call on this project's 2-core machine
(interleaved in one process, 2 × 600 calls; docs/development.md), a tenth of a shell ``echo``. A
call whose request is plain takes this path instead; everything else still goes to the SDK.

Invariants this module owns:

- Only a plain call is taken: a request (an integer or string id, not already in flight here) with
  params that hold ``name`` (a string), ``arguments`` (an object, absent or null) and at most a
  ``_meta`` with a ``progressToken``, on a connection whose ``initialize`` was accepted, while the
  server's middleware is tether's own (``McpFrontDoor.serves_calls_directly``). Anything else —
  a malformed request, one before the handshake, a newer era's envelope — goes to the SDK, which
  answers it as before.
- A taken call gets what the SDK would have sent: ``McpFrontDoor.answer_call`` (the same code the
  SDK's handler runs, argument checks of ``tether.mcp.requests`` first), framed as a JSON-RPC
  response; its result is the SDK's serialisation of the same ``CallToolResult`` on every
  handshake version (tests/mcp/test_direct_calls.py). The person at a client that declared form
  elicitation is asked on the connection's stream, which on stdio is the request's.
- ``notifications/cancelled`` naming a taken call cancels it (its handler kills what it started)
  and nothing is answered, as the SDK does; when the client leaves (stdin closed, stdout broken)
  every taken call is cancelled and awaited before the conversation ends. Each is audited with
  that cause (``McpFrontDoor.why_ended``), told before the call is cancelled.
- ``running(key)`` says whether a call taken here with that id (``request_key``) still runs: the
  stdio loop answers a request reusing it with ``duplicate_id`` (``tether.mcp.request_ids``).
- Like the SDK, nothing bounds the calls running at once: the wire's backpressure counts messages
  not yet taken (``tether.mcp.stdio``), so that a client can always cancel a call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from mcp.server.connection import Connection
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp_types import INTERNAL_ERROR

from tether.mcp.requests import check_call
from tether.mcp.server import McpFrontDoor
from tether.mcp.wire import Message, StdioWire, error_response
from tether.tools.ending import Ending

logger = logging.getLogger(__name__)

_PARAMS: Final = frozenset({"name", "arguments", "_meta"})
_META: Final = frozenset({"progressToken"})


class DirectCalls:
    """The calls of one stdio conversation taken beside the SDK (see the module docstring)."""

    def __init__(self, front_door: McpFrontDoor, wire: StdioWire) -> None:
        self._door = front_door
        self._wire = wire
        self._connection: Connection | None = None
        self._calls: dict[Any, asyncio.Task[None]] = {}
        self._cancelled: set[Any] = set()  # calls the client cancelled (notifications/cancelled)

    def attach(self, connection: Connection) -> None:
        """The conversation's connection (calls are taken only once it is known)."""
        self._connection = connection

    def running(self, key: Any) -> bool:
        """Whether a call taken here with id ``key`` (``request_key``) is still running."""
        return key in self._calls

    def take(self, item: Message) -> bool:
        """Serve ``item`` here if it is a plain call or cancels one taken here; ``False``: it goes
        to the SDK."""
        method = item.get("method")
        if method == "tools/call":
            return self._take_call(item)
        if method == "notifications/cancelled" and "id" not in item:
            params = item.get("params")
            rid = cancelled_request_id_from_params(params if isinstance(params, dict) else None)
            key = coerce_request_id(rid) if rid is not None else None
            task = self._calls.get(key)
            if task is None:
                return False
            self._cancelled.add(key)
            task.cancel()
            return True
        return False

    def _take_call(self, item: Message) -> bool:
        connection = self._connection
        rid = item.get("id")
        params = item.get("params")
        if (
            connection is None
            or not connection.initialize_accepted
            or not self._door.serves_calls_directly
            or not (isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)))
            or coerce_request_id(rid) in self._calls
            or not isinstance(params, dict)
            or not params.keys() <= _PARAMS
            or not isinstance(params.get("name"), str)
        ):
            return False
        arguments = params.get("arguments")
        meta = params.get("_meta")
        if not (arguments is None or isinstance(arguments, dict)):
            return False
        if not (meta is None or (isinstance(meta, dict) and meta.keys() <= _META)):
            return False
        key = coerce_request_id(rid)
        task = asyncio.get_running_loop().create_task(self._serve(rid, key, params, connection))
        self._calls[key] = task
        task.add_done_callback(lambda _t: self._ended(key))
        return True

    def _ended(self, key: Any) -> None:
        self._calls.pop(key, None)
        self._cancelled.discard(key)

    async def _serve(self, rid: str | int, key: Any, params: dict[str, Any], connection: Connection) -> None:
        try:
            result = check_call(params, self._door.registry)
            if result is None:
                ending = self._door.why_ended(connection, lambda: key in self._cancelled)
                call = self._door.call_context(connection, ending=ending)
                result = await self._door.answer_call(params["name"], params.get("arguments") or {}, call)
        except Exception:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                return  # cancelled by the client, or the client left: MCP answers nothing
            logger.exception("tools/call %r failed outside its tool", params.get("name"))
            self._wire.send(error_response(rid, INTERNAL_ERROR, "Internal error"))
            return
        try:
            self._wire.send({"jsonrpc": "2.0", "id": rid, "result": result})
        except ValueError:  # text JSON cannot carry (a lone surrogate): the client still gets an answer
            logger.exception("the result of tools/call %r cannot be sent as JSON", params.get("name"))
            message = "Internal error: the tool's result cannot be encoded as JSON; the server log has it"
            self._wire.send(error_response(rid, INTERNAL_ERROR, message))

    async def close(self, how: str = "") -> None:
        """The client left (``how``: what showed it): cancel every call still running and wait for
        each to end."""
        if self._connection is not None:
            self._door.connection_ended(self._connection, Ending(cause="client-left", note=how))
        tasks = list(self._calls.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
