"""``tether mcp``: one MCP conversation on the claimed stdio wire, served by the SDK.

Invariants this module owns:

- stdout carries only MCP messages: the wire was claimed by ``StdioWire.claim`` before anything
  else ran. The handshake loop (not the dual-era loop) is used on purpose: see
  ``tether.mcp.server`` on protocol eras.
- The hand-over from ``EarlyFront`` keeps order: its backlog reaches the SDK first, then the live
  stream. The SDK's answer to an ``initialize`` that was already answered early is dropped, so the
  client gets exactly one. Right behind the client's ``initialize``, a private ``tools/list`` (an id
  no client can guess) asks the SDK for the real tool list; its answer never reaches the client.
  If the list given early differs from it, the client gets ``notifications/tools/list_changed``;
  whenever the real answers differ from the cache, the cache is rewritten.
- A message the SDK's models refuse is answered with INVALID_REQUEST naming the field, never
  dropped. Once the SDK is loaded the event loop reads the input itself, and stops reading while
  64 messages wait for the SDK (backpressure; a call being answered waits for nothing, on either
  path, so that a client can always cancel it).
- Once the SDK has taken over, a plain ``tools/call`` read by the loop is answered beside the SDK
  (``tether.mcp.direct``); the early front's backlog and everything else go to the SDK.
- A request id is unique among the requests in flight (JSON-RPC): a request whose id (as the SDK
  correlates ids: ``"7"`` is ``7``) names one read and not yet answered — queued for the SDK,
  running there, or a call running beside it — is answered at once with INVALID_REQUEST naming the
  id, and goes no further; the first is answered as if the second had never come. An id is free
  again once its request is answered, or cancelled by the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from tether.mcp.direct import DirectCalls
from tether.mcp.handshake import EarlyFront, Handshake, HandshakeCache
from tether.mcp.request_ids import duplicate_id, request_key
from tether.mcp.server import McpFrontDoor, settle_heap
from tether.mcp.wire import EOF, INVALID_REQUEST, Item, Message, StdioWire, error_response
from tether.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)

_IN_FLIGHT: Final = 64


class _Broken:
    """The client closed its end of stdout: end the conversation as if stdin had closed."""


_BROKEN: Final = _Broken()


@dataclass(slots=True, kw_only=True)
class _Handover:
    """What the two pumps share about the early answers and the cache."""

    early: EarlyFront
    cache: HandshakeCache
    cached: Handshake | None
    wire: StdioWire
    probe_id: str = field(default_factory=lambda: "tether-probe-" + secrets.token_hex(16))
    init_id: Any = None  # the client's initialize, once delivered to the SDK
    init_result: Message | None = None
    tools_result: Message | None = None
    init_seen: bool = False
    settled: bool = False  # settle_heap has run

    def swallow(self, message: types.JSONRPCMessage) -> bool:
        """Whether an outgoing SDK message is ours to consume rather than the client's."""
        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return False
        if message.id == self.probe_id:
            if isinstance(message, types.JSONRPCResponse):
                self._tools_known(message.result)
            else:
                logger.warning("the SDK refused tether's own tools/list: %s", message.error.message)
            return True
        if self.init_seen or self.init_id is None or message.id != self.init_id:
            return False
        self.init_seen = True
        answered_early = self.early.answered_initialize is not None
        if isinstance(message, types.JSONRPCError):
            if answered_early:
                logger.warning(
                    "initialize was answered early but the SDK refused it: %s", message.error.message
                )
            return False
        self.init_result = message.result
        if answered_early and self.cached is not None:
            early = self.cached.initialize_for(message.result.get("protocolVersion"))
            if early != message.result:
                logger.warning("the early initialize answer differed from the SDK's; the cache is rewritten")
        self._maybe_save()
        return answered_early

    def _tools_known(self, result: Message) -> None:
        self.tools_result = result
        served = self.early.served_tools
        if served is not None and served != result:
            logger.info("the tool list given early was stale; sending notifications/tools/list_changed")
            self.wire.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        self._maybe_save()

    def _maybe_save(self) -> None:
        if self.init_result is None or self.tools_result is None:
            return
        if not self.settled:
            self.settled = True
            settle_heap()  # the real tool list is known: the server is loaded
        fresh = Handshake(
            initialize=self.init_result,
            tools=self.tools_result,
            versions=tuple(HANDSHAKE_PROTOCOL_VERSIONS),
            latest=LATEST_HANDSHAKE_VERSION,
        )
        cached = self.cached
        same = (
            cached is not None
            and cached.tools == fresh.tools
            and cached.versions == fresh.versions
            and cached.latest == fresh.latest
            and cached.initialize_for(fresh.initialize.get("protocolVersion")) == fresh.initialize
        )
        if not same:
            self.cache.save(fresh)
            self.cached = fresh


async def serve_stdio(
    front_door: McpFrontDoor, *, wire: StdioWire, early: EarlyFront, cache: HandshakeCache
) -> None:
    """Serve the conversation until the client closes stdin (or stops reading stdout)."""
    server = front_door.server
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Item | _Broken] = asyncio.Queue()
    direct = DirectCalls(front_door, wire)
    queued: Counter[Any] = Counter()  # ids of requests in the inbox, not yet taken by the SDK
    dispatcher: _Dispatcher | None = None

    def in_use(key: Any) -> bool:
        sdk = dispatcher is not None and dispatcher.in_flight(key)
        return sdk or queued[key] > 0 or direct.running(key)

    def deliver(item: Item) -> None:  # the event loop's reader
        _announce(item, front_door.registry)
        if isinstance(item, dict):
            key = request_key(item)
            if key is not None and in_use(key):
                wire.send(duplicate_id(item["id"]))
                return
            if direct.take(item):
                return
            if key is not None:
                queued[key] += 1
        inbox.put_nowait(item)
        if inbox.qsize() >= _IN_FLIGHT:
            wire.pause_reading()

    def broken() -> None:  # whichever thread wrote
        with contextlib.suppress(RuntimeError):  # the loop has already finished
            loop.call_soon_threadsafe(inbox.put_nowait, _BROKEN)

    wire.on_broken(broken)
    handover = _Handover(early=early, cache=cache, cached=cache.load(), wire=wire)
    wire.stop_reader_thread()
    backlog = early.take_backlog()
    for item in backlog:
        key = request_key(item) if isinstance(item, dict) and not _answered_early(item, early) else None
        if key is not None:
            queued[key] += 1
    wire.read_on_loop(loop, deliver)
    inbound = _Inbound(backlog, inbox, handover, direct=direct, queued=queued)
    # serve_loop's recipe, with the connection kept: the direct calls answer on it.
    dispatcher = _Dispatcher(inbound, _Outbound(handover), inline_methods=frozenset({"initialize"}))
    inbound.in_flight = dispatcher.in_flight
    connection = Connection.for_loop(dispatcher)
    direct.attach(connection)
    try:
        async with server.lifespan(server) as state:
            await serve_connection(
                server,
                dispatcher,
                connection=connection,
                lifespan_state=state,
                init_options=front_door.initialization_options(),
            )
    finally:
        wire.stop_reading()
        # Also when the serving was cancelled (a stop signal): the calls beside the SDK end, and
        # are audited, before the conversation does.
        with anyio.CancelScope(shield=True):
            await direct.close()
    logger.info("stdio client closed the connection")


def _answered_early(item: Message, early: EarlyFront) -> bool:
    """The client's ``initialize`` the early front answered: no longer in flight for the client
    (the SDK still runs it, inline, and its answer is dropped)."""
    return item.get("method") == "initialize" and early.answered_initialize is not None


def _announce(item: Item, registry: ToolRegistry) -> None:
    """A ``tools/call`` is announced to the registry as it is read, before the SDK parses it: a
    tool starts what it reads first meanwhile (``ToolRegistry.expect``)."""
    if isinstance(item, dict) and item.get("method") == "tools/call":
        params = item.get("params")
        if isinstance(params, dict) and isinstance(name := params.get("name"), str):
            registry.expect(name, params.get("arguments"))


class _Dispatcher(JSONRPCDispatcher[Any]):
    """The SDK's dispatcher, asked which request ids it is running (the SDK itself lets a reused
    id overwrite the first: its ``_in_flight`` table, keyed by ``coerce_request_id``)."""

    def in_flight(self, key: Any) -> bool:
        return key in self._in_flight


class _Inbound:
    """The SDK's read stream: the early front's backlog, then what the loop's reader delivered,
    each message validated as the SDK asks for it. No task or memory stream sits between the
    reader and the SDK: each would cost every request a pass of the event loop."""

    def __init__(
        self,
        backlog: list[Item],
        inbox: asyncio.Queue[Item | _Broken],
        handover: _Handover,
        *,
        direct: DirectCalls,
        queued: Counter[Any],
    ) -> None:
        self._backlog = deque(backlog)
        self._inbox = inbox
        self._handover = handover
        self._direct = direct
        self._queued_ids = queued
        self.in_flight: Callable[[Any], bool] = lambda _key: False  # the SDK's requests running
        self._queued: deque[SessionMessage] = deque()  # tether's own probe, right behind initialize
        self._ended = False

    async def receive(self) -> SessionMessage:
        how = "its stdin closed"
        while not self._ended:
            if self._queued:
                return self._queued.popleft()
            item = self._backlog.popleft() if self._backlog else await self._next()
            if item is EOF or not isinstance(item, dict):
                if item is _BROKEN:
                    how = "it stopped reading tether mcp's stdout"
                break
            key = request_key(item)
            if key is not None and not _answered_early(item, self._handover.early):
                if self._queued_ids[key] > 1:
                    self._queued_ids[key] -= 1
                else:
                    self._queued_ids.pop(key, None)
                if self.in_flight(key) or self._direct.running(key):
                    # Only the early front's backlog was not checked as it was read.
                    self._handover.wire.send(duplicate_id(item["id"]))
                    continue
            try:
                message = types.jsonrpc_message_adapter.validate_python(item, by_name=False)
            except ValidationError as exc:
                _refuse(item, exc, self._handover.wire)
                continue
            handover = self._handover
            if (
                handover.init_id is None
                and isinstance(message, types.JSONRPCRequest)
                and message.method == "initialize"
            ):
                # The SDK handles initialize before reading on, so the probe meets an initialized
                # session.
                handover.init_id = message.id
                probe = types.JSONRPCRequest(jsonrpc="2.0", id=handover.probe_id, method="tools/list")
                self._queued.append(SessionMessage(probe))
            return SessionMessage(message)
        self._ended = True
        # The client left: the calls answered beside the SDK end before the conversation does, and
        # the SDK's (cancelled as the stream ends) are audited as ended by that.
        await self._direct.close(how)
        raise anyio.EndOfStream

    async def _next(self) -> Item | _Broken:
        got = await self._inbox.get()
        wire = self._handover.wire
        if wire.reading_paused and self._inbox.qsize() < _IN_FLIGHT // 2:
            wire.resume_reading()
        return got

    def __aiter__(self) -> _Inbound:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended = True

    async def __aenter__(self) -> _Inbound:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


def _refuse(item: Message, exc: ValidationError, wire: StdioWire) -> None:
    errors = exc.errors()
    loc = errors[0]["loc"] if errors else ()
    msg = errors[0]["msg"] if errors else "invalid"
    where = ".".join(str(part) for part in loc if not str(part).startswith("JSONRPC"))
    reason = f"field '{where}': {msg}" if where else msg
    logger.info("rejected a message the SDK cannot read: %s", reason)
    rid = item.get("id")
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        wire.send(error_response(rid, INVALID_REQUEST, f"Invalid request: {reason}"))
    elif "method" in item and "id" not in item:
        return  # a notification: nothing to answer
    else:
        wire.send(error_response(None, INVALID_REQUEST, f"Invalid request: {reason}"))


class _Outbound:
    """The SDK's write stream: each message it sends is framed and handed to the wire at once (the
    wire keeps frames whole and in order, and never blocks the loop); tether's own answers are
    consumed on the way (``_Handover.swallow``)."""

    def __init__(self, handover: _Handover) -> None:
        self._handover = handover

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if self._handover.swallow(message):
            return
        self._handover.wire.send_frame(
            message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
        )

    async def aclose(self) -> None:
        return

    async def __aenter__(self) -> _Outbound:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return
