"""The MCP front door: a lowlevel ``mcp`` Server whose tools and resources are the ``ToolRegistry``.

Invariants this module owns:

- It holds no tool logic. ``tools/list`` is the registry's model-visible tools at this moment
  (people-only tools are never listed, and a call of one is answered as an unknown tool);
  ``tools/call`` runs ``ToolRegistry.call`` (handler plus audit and masking middleware) with a
  ``CallContext`` naming the conversation (one per MCP connection), the client's own name for
  itself (``clientInfo`` of ``initialize``) and, when the client declared form elicitation, the
  person at the client (``elicitation``) whom an escalation or a guard block is put to.
- Unusable request parameters are answered naming the field (``tether.mcp.requests``): a
  ``tools/call`` whose ``arguments`` is not an object is a tool error, like any argument error.
- A ``TetherError`` becomes a tool error result (``isError``) whose text starts with its stable
  code; any other exception is logged with its traceback and answered with a generic tool error.
  Neither stops the server. Cancellation (``notifications/cancelled``) is not an error: it
  propagates into the handler, which kills its process; MCP sends no response for it.
- Every call's context says why the call was cancelled, if it is (``CallContext.ending``, audited
  as ``extra.cause``): the client's ``notifications/cancelled`` (``peer_cancelled``), else what
  ended its connection (``connection_ended``: the stdio client left) or its HTTP session
  (``session_watch``: ``DELETE``, the idle limit).
- Every registry change reaches every initialized connection as
  ``notifications/tools/list_changed``.
- Only the handshake protocol era is served. A conversation *is* an MCP session, and the
  2026-07-28 per-request era has no session to own shells, so ``server/discover`` answers
  "method not found" and SDK clients in ``auto`` mode fall back to ``initialize``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND
from pydantic import ValidationError

from tether import __version__
from tether.errors import TetherError
from tether.mcp.elicitation import Asker, ElicitationChannel, elicit_over, person_name, supports_forms
from tether.mcp.handshake import DISCOVER_METHOD, DISCOVER_REFUSAL
from tether.mcp.ids import new_conversation_id
from tether.mcp.notifier import ConnectionNotifier, subscriptions
from tether.mcp.requests import check_call, named_invalid_params, tool_error
from tether.tools.bash import ToolAborted
from tether.tools.ending import Ending, WhyEnded
from tether.tools.registry import CallContext, ResourceSource, ToolDef, ToolRegistry, ToolResult

logger = logging.getLogger(__name__)


def settle_heap() -> None:
    """The server is loaded (the SDK, the tools, their first listing): what exists now lives as long
    as the process, so the garbage collector stops scanning it. A full collection of those ~100,000
    objects otherwise pauses whatever call is running for 50–70 ms (``bench/delay.py``'s maximum)."""
    gc.freeze()


RESOURCE_NOT_FOUND: Final = -32002  # MCP's code for resources/read of an unknown URI
_CONVERSATION_KEY: Final = "tether.conversation"
_NOTIFIER_KEY: Final = "tether.notifier"
_ENDED_KEY: Final = "tether.ended"  # the Ending of a connection whose client left

# Called with the conversation id once its MCP connection has closed (e.g. to stop its jobs).
ConversationEnd = Callable[[str], Awaitable[None]]

DEFAULT_INSTRUCTIONS: Final = (
    "tether gives you a shell. Use `bash` for one-shot commands (each call is a fresh process with a "
    "deadline); long commands can run in the background and be followed with job_output."
)


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The per-client ``Connection`` behind a request context.

    SDK 2.3 builds handler contexts with a per-request ``ServerSession`` that keeps its connection
    private; this is the one place that reaches for it (pinned by ``mcp==2.3.0``).
    """
    connection: Connection = ctx.session._connection
    return connection


def peer_cancelled(ctx: ServerRequestContext[Any, Any]) -> Callable[[], bool]:
    """Whether the client has sent ``notifications/cancelled`` for this request, asked when the call
    ends: the SDK sets its dispatch context's ``cancel_requested`` before it cancels the handler,
    and keeps that context private to the per-request session (pinned by ``mcp==2.3.0``)."""
    requested: anyio.Event = ctx.session._request_outbound.cancel_requested
    return requested.is_set


class McpFrontDoor:
    """Builds the ``Server`` and keeps the set of live connections for change broadcasts."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        instructions: str | None = None,
        conversation: str | None = None,
        name: str = "tether",
        on_conversation_end: ConversationEnd | None = None,
    ) -> None:
        self.registry = registry
        self._fixed_conversation = conversation
        self._on_conversation_end = on_conversation_end
        self._connections: set[Connection] = set()
        self.server: Server[dict[str, Any]] = _ListChangedServer(
            name,
            version=__version__,
            instructions=instructions or DEFAULT_INSTRUCTIONS,
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
        )
        self.server.add_request_handler(DISCOVER_METHOD, types.RequestParams, _no_discover)
        # The SDK's only default middleware opens an OpenTelemetry span per message, a no-op
        # unless an exporter is installed (tether installs none), yet ~80 µs of every call.
        self.server.middleware.clear()
        self.server.middleware.append(self._track_connection)
        self.server.middleware.append(self._checked_params)
        self._own_middleware = list(self.server.middleware)
        # Over HTTP (``build_http_app``): given a session id, why that session ended if it has.
        self.session_watch: Callable[[str | None], WhyEnded] | None = None

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options()

    # -- connections and conversations -------------------------------------------------------

    def conversation_of(self, connection: Connection) -> str:
        found = connection.state.get(_CONVERSATION_KEY)
        if isinstance(found, str):
            return found
        conversation = self._fixed_conversation or new_conversation_id()
        connection.state[_CONVERSATION_KEY] = conversation
        return conversation

    def connection_ended(self, connection: Connection, ending: Ending) -> None:
        """The client of ``connection`` left (``ending`` says how): a call cancelled from now on
        was cancelled by that. Called before the calls are cancelled."""
        connection.state.setdefault(_ENDED_KEY, ending)

    def why_ended(self, connection: Connection, cancelled_by_client: Callable[[], bool]) -> WhyEnded:
        """The ``CallContext.ending`` of one call on ``connection``: ``cancelled_by_client`` says
        whether the client cancelled this very request."""
        session = self.session_watch(connection.session_id) if self.session_watch is not None else None

        def why() -> Ending | None:
            if cancelled_by_client():
                return Ending(cause="client-cancelled")
            left = connection.state.get(_ENDED_KEY)
            if isinstance(left, Ending):
                return left
            return session() if session is not None else None

        return why

    def call_context(
        self, connection: Connection, *, ask: Asker | None = None, ending: WhyEnded | None = None
    ) -> CallContext:
        """The context of one call on ``connection``. When the client declared form elicitation,
        the person at the client is reached with ``ask`` (by default on the connection's own
        stream, which is the request's on stdio); ``ending`` says why the call was cancelled."""
        notifier = connection.state.get(_NOTIFIER_KEY)
        if not isinstance(notifier, ConnectionNotifier):
            notifier = ConnectionNotifier(connection)
            connection.state[_NOTIFIER_KEY] = notifier
        conversation = self.conversation_of(connection)
        person = None
        if supports_forms(connection.client_capabilities):
            person = ElicitationChannel(
                ask if ask is not None else elicit_over(connection), who=person_name(connection, conversation)
            )
        return CallContext(
            actor=conversation,
            source="tool",
            notifier=notifier,
            client=client_name(connection),
            person=person,
            ending=ending,
        )

    @property
    def serves_calls_directly(self) -> bool:
        """Whether a ``tools/call`` may be answered beside the SDK (``tether.mcp.direct``): only
        while the server's middleware is tether's own, which ``answer_call`` and the direct path
        do in full. Middleware added since (a test's, an embedder's) must see every call."""
        return self.server.middleware == self._own_middleware

    async def _track_connection(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        connection = connection_of(ctx)
        if connection not in self._connections:
            self._connections.add(connection)
            connection.exit_stack.callback(self._connections.discard, connection)
            if self._on_conversation_end is not None:
                connection.exit_stack.push_async_callback(self._end_conversation, connection)
            logger.info("conversation %s connected", self.conversation_of(connection))
        return await call_next(ctx)

    async def _checked_params(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        # Ahead of the SDK's own validation, whose errors name no field (see tether.mcp.requests).
        if ctx.method == "tools/call":
            refusal = check_call(ctx.params, self.registry)
            if refusal is not None:
                return refusal
        try:
            return await call_next(ctx)
        except ValidationError as exc:
            raise named_invalid_params(ctx.method, exc) from None

    async def _end_conversation(self, connection: Connection) -> None:
        conversation = self.conversation_of(connection)
        logger.info("conversation %s ended", conversation)
        if self._on_conversation_end is not None:
            try:
                await self._on_conversation_end(conversation)
            except Exception:
                logger.exception("cleaning up after conversation %s failed", conversation)

    @asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        # The registry's listeners are synchronous; a one-slot stream coalesces a burst of changes
        # into one broadcast without ever blocking the code that changed the registry.
        send, receive = anyio.create_memory_object_stream[None](1)
        unsubscribe = self.registry.subscribe(_nudger(send))
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._broadcast_changes, receive)
            try:
                yield {}
            finally:
                unsubscribe()
                tg.cancel_scope.cancel()
                send.close()

    async def _broadcast_changes(self, receive: MemoryObjectReceiveStream[None]) -> None:
        async with receive:
            async for _ in receive:
                for connection in list(self._connections):
                    if connection.initialized.is_set():
                        await connection.send_tool_list_changed()

    # -- tools ----------------------------------------------------------------------------------

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_wire_tool(tool) for tool in self.registry.list()])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Elicitation rides the request's own session: over streamable HTTP, the request's stream.
        ask = functools.partial(ctx.session.elicit_form, related_request_id=ctx.request_id)
        connection = connection_of(ctx)
        call = self.call_context(connection, ask=ask, ending=self.why_ended(connection, peer_cancelled(ctx)))
        answer = await self.answer_call(params.name, params.arguments or {}, call)
        return types.CallToolResult.model_validate(answer)

    async def answer_call(self, name: str, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """The result of one ``tools/call`` in its wire form (``CallToolResult``), whichever path
        the request came by: the tool's result, or a tool error whose text starts with its stable
        code. Raises only when the call was cancelled (MCP answers nothing then)."""
        tool = self.registry.get(name)
        if tool is None:
            names = ", ".join(sorted(t.name for t in self.registry.list())) or "(none)"
            return tool_error(f"NOT_FOUND: unknown tool {name!r}; available tools: {names}")
        try:
            # Through the registry's door: the audit record and secret masking happen there.
            result = await self.registry.call(tool.name, arguments, call)
        except ToolAborted as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the client cancelled: MCP sends no response for a cancelled request
            return tool_error(f"{exc.code}: {exc.message}")
        except TetherError as exc:
            logger.info("tool %s refused for %s: %s: %s", tool.name, call.actor, exc.code, exc.message)
            return tool_error(f"{exc.code}: {exc.message}")
        except Exception:
            logger.exception("tool %s failed unexpectedly for %s", tool.name, call.actor)
            return tool_error(
                f"INTERNAL: tool {tool.name} failed unexpectedly; the server log has the details"
            )
        return _wire_result(tool, result)

    # -- resources ------------------------------------------------------------------------------

    def _source_for(self, uri: str) -> ResourceSource:
        for source in self.registry.resources:
            if source.handles(uri):
                return source
        raise MCPError(
            RESOURCE_NOT_FOUND, f"unknown resource {uri!r}; resources/list names the readable ones"
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        call = self.call_context(connection_of(ctx))
        resources: list[types.Resource] = []
        for source in self.registry.resources:
            for info in await source.list(call):
                resources.append(
                    types.Resource(
                        uri=info.uri,
                        name=info.name,
                        description=info.description or None,
                        mime_type=info.mime_type,
                    )
                )
        return types.ListResourcesResult(resources=resources)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=source.template.uri,
                    name=source.template.name,
                    description=source.template.description or None,
                    mime_type=source.template.mime_type,
                )
                for source in self.registry.resources
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        source = self._source_for(uri)
        try:
            text = await source.read(uri, self.call_context(connection_of(ctx)))
        except TetherError as exc:
            raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text)])

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        source = self._source_for(uri)
        try:
            # Read once: a shell that does not exist (or an id that is none) is refused now, not
            # subscribed to in silence; its updates would never come.
            await source.read(uri, self.call_context(connection_of(ctx)))
        except TetherError as exc:
            raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc  # as a read says it
        subscriptions(connection_of(ctx)).add(uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        subscriptions(connection_of(ctx)).discard(str(params.uri))
        return types.EmptyResult()


def client_name(connection: Connection) -> str | None:
    """``name version`` from the client's ``initialize`` (``clientInfo``), once it has said it."""
    params = connection.client_params
    info = params.client_info if params is not None else None
    if info is None or not info.name:
        return None
    return f"{info.name} {info.version}".strip() if info.version else info.name


class _ListChangedServer(Server[dict[str, Any]]):
    """Advertises ``tools.listChanged`` on every transport, including the HTTP session manager,
    which builds its initialization options without arguments."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _nudger(send: MemoryObjectSendStream[None]) -> Callable[[], None]:
    def nudge() -> None:
        # WouldBlock: a broadcast is already pending (it will list the newest state).
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            send.send_nowait(None)

    return nudge


async def _no_discover(_ctx: ServerRequestContext[Any, Any], _params: types.RequestParams) -> HandlerResult:
    raise MCPError(METHOD_NOT_FOUND, DISCOVER_REFUSAL)


def _wire_tool(tool: ToolDef) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=types.ToolAnnotations(title=tool.title, read_only_hint=tool.read_only),
    )


def _wire_result(tool: ToolDef, result: ToolResult) -> dict[str, Any]:
    # A success must carry structuredContent when an outputSchema is published; an error need not.
    # The SDK's own serialisation of the same CallToolResult, on every handshake version, is this
    # (tests/mcp/test_direct_calls.py).
    wire: dict[str, Any] = {"content": [{"type": "text", "text": result.text}], "isError": result.is_error}
    if result.is_error or tool.output_schema is None:
        structured: dict[str, Any] | None = result.structured or None
    else:
        structured = result.structured
    if structured is not None:
        wire["structuredContent"] = structured
    return wire
