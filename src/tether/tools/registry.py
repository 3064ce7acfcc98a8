"""The live set of model-visible tools, shared by every front door.

Invariant: a tool exists once, here, as a ``ToolDef``; the MCP server, the panel and the CLI call
the same handler, through ``ToolRegistry.call`` so that every call passes the same middleware
(audit record, secret masking) whichever door it came in by. Definitions can be added, replaced
and removed at run time (spec 000 "schema hot-switch"); every
change is announced to listeners so a front door can send ``notifications/tools/list_changed``.

People-only tools (``ToolDef.people_only``: manual locks, vault administration, audit checks,
timelines and recordings) are the people's doors — the panel and the CLI act through them, never
through the store. They are part of no model-visible listing (``list``, ``get``) and a call from
any other source (an MCP conversation: ``source="tool"``) is answered exactly as for a tool that
does not exist.

A handler receives the raw argument object and validates it itself (pydantic at this boundary);
bad input raises ``UsageError`` naming the field and the allowed values. Before any handler, inside
the middleware (so the refusal is audited), every string of the arguments must be Unicode text:
JSON can carry a lone surrogate (``"\\ud800"``) and so can a command line's bytes that are not
UTF-8 (PEP 383), but no terminal, file or database can, so such a call is refused here once for
every tool and door. A command's own failure is a normal ``ToolResult``; only input errors and
infrastructure failures raise. A handler's write that the file system refuses (full, over quota,
read-only) becomes a ``StorageError`` there too, naming the file: a condition of the machine that
its user fixes, not a bug to be reported as an internal error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from tether.approvals import PersonChannel
from tether.errors import STORAGE_ERRNOS, NotFoundError, StorageError, UsageError
from tether.home import home_text
from tether.tools.ending import WhyEnded

logger = logging.getLogger(__name__)

# No tool takes arguments nested more than a few levels; deeper input is a mistake or an attack
# on the recursion of whatever reads it (or, from Python, a structure that contains itself), and
# is refused before any tool code runs.
MAX_ARGUMENT_DEPTH: Final = 32

Source = Literal["tool", "panel", "host", "cli"]
# The sources a person acts through: only they may call people-only tools.
PEOPLE_SOURCES: frozenset[str] = frozenset({"panel", "cli"})


class Notifier(Protocol):
    """How a tool reaches its caller outside a result (subscriptions, progress)."""

    async def resource_updated(self, uri: str) -> None: ...

    async def log(self, level: str, logger: str, data: Any) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """Who is calling: ``actor`` is the conversation id (MCP session), ``panel`` or ``cli``;
    ``client`` the name (and version) the MCP client gave in ``initialize`` (``clientInfo``);
    ``person``: the person at the client, when the front door can ask them during this call (MCP
    elicitation) — an escalation or a guard block is put to them, else to the panel's queue;
    ``who``: the person signed in to the panel with access of their own (``tether panel add``),
    named in the audit log (``audit_actor``), an approval's answer and a manual lock — ``actor``
    stays ``panel``, which owns the panel's shells and locks whoever of its people acts;
    ``ending``: the front door's answer to why the call was cancelled, asked when it is
    (``tether.tools.ending``)."""

    actor: str
    source: Source = "tool"
    notifier: Notifier | None = None
    person: PersonChannel | None = None
    client: str | None = None
    who: str | None = None
    ending: WhyEnded | None = None

    @property
    def audit_actor(self) -> str:
        """The actor of this call's audit records: ``panel:alice`` for a named person."""
        return f"{self.actor}:{self.who}" if self.who else self.actor


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a tool returns: text for the model plus ``structured`` matching ``output_schema``."""

    text: str
    structured: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False


Handler = Callable[[Mapping[str, Any], CallContext], Awaitable[ToolResult]]
# Runs around every ``ToolRegistry.call``: (tool, arguments, context, next) -> result. The audit
# log and secret masking are one (``tools.audited``).
Middleware = Callable[["ToolDef", Mapping[str, Any], CallContext, Handler], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFields:
    """What a tool without ``tasks`` tells its audit record: the action, its targets, the reason."""

    action: str
    targets: tuple[str, ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDef:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    output_schema: dict[str, Any] | None = None
    title: str | None = None
    read_only: bool = False
    # Listed to nobody, callable only from ``PEOPLE_SOURCES`` (see the module docstring).
    people_only: bool = False
    # False: the middleware masks but writes no record (reading or checking the log itself).
    audit_calls: bool = True
    # How the audit record names the action and targets, for tools whose arguments have no tasks.
    audit_fields: Callable[[Mapping[str, Any]], AuditFields] | None = None
    # Started when a call of this tool arrives at a front door, before it is parsed: read-only
    # work the call begins with (a shell tool's pane listing), given the call's arguments as they
    # came (unchecked: a hint, never trusted). Never a decision, never a write.
    expect: Callable[[Any], None] | None = None


Listener = Callable[[], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceInfo:
    uri: str
    name: str
    description: str = ""
    mime_type: str = "text/plain"


class ResourceSource(Protocol):
    """Readable resources a tool family publishes (e.g. one per persistent shell).

    A front door lists them, reads them, and forwards ``Notifier.resource_updated`` for them.
    ``template`` names them all at once: its ``uri`` is a URI template (RFC 6570), such as
    ``tether://shell/{shell}``, for a client that lists templates rather than resources.
    """

    template: ResourceInfo

    def handles(self, uri: str) -> bool: ...

    async def list(self, ctx: CallContext) -> list[ResourceInfo]: ...

    async def read(self, uri: str, ctx: CallContext) -> str: ...


class ToolRegistry:
    """Named tool definitions with change notification."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}
        self._listeners: list[Listener] = []
        self.resources: list[ResourceSource] = []
        self.middleware: list[Middleware] = []

    def add(self, tool: ToolDef) -> None:
        """Add or replace ``tool`` (by name); listeners hear about it only if it changed."""
        if self._tools.get(tool.name) is tool:
            return
        self._tools[tool.name] = tool
        self._changed()

    def remove(self, name: str) -> bool:
        if self._tools.pop(name, None) is None:
            return False
        self._changed()
        return True

    def get(self, name: str, *, people: bool = False) -> ToolDef | None:
        """A model-visible tool by name; with ``people=True`` a people-only tool too."""
        tool = self._tools.get(name)
        if tool is not None and tool.people_only and not people:
            return None
        return tool

    def list(self, *, people: bool = False) -> list[ToolDef]:
        """The model-visible tools (what MCP lists); ``people=True``: the people-only ones instead."""
        return [t for t in self._tools.values() if t.people_only == people]

    def expect(self, name: str, arguments: Any = None) -> None:
        """A call of tool ``name`` has arrived at a front door and is run next: the tool starts
        what it reads first (``ToolDef.expect``), with the call's ``arguments`` as they came (not
        yet checked). Never raises: the call itself reports errors."""
        tool = self._tools.get(name)
        if tool is None or tool.expect is None:
            return
        try:
            tool.expect(arguments)
        except Exception:
            logger.exception("preparing for a %s call failed", name)

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None, ctx: CallContext, *, audited: bool = True
    ) -> ToolResult:
        """Run tool ``name`` through the middleware: the one door every front door uses.

        ``audited=False`` skips the middleware (only for a front door's own background refresh,
        e.g. the panel polling ``shell_state``; never for an action someone asked for).
        """
        tool = self._tools.get(name)
        if tool is None or (tool.people_only and ctx.source not in PEOPLE_SOURCES):
            # A people-only tool called by anyone else is answered as a tool that does not exist.
            names = ", ".join(sorted(t.name for t in self.list())) or "(none)"
            raise NotFoundError(f"unknown tool {name!r}; available tools: {names}")
        problem = argument_problem(name, arguments, self)
        if problem is not None:
            raise UsageError(problem)
        if arguments is None:  # taken as ``{}`` (argument_problem says so): no handler sees None
            arguments = {}
        handler: Handler = _text_checked(tool)
        if audited:
            for layer in reversed(self.middleware):
                handler = _bind(layer, tool, handler)
        return await handler(arguments, ctx)

    def add_resource_source(self, source: ResourceSource) -> None:
        self.resources.append(source)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener()`` after every change; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()


def _text_checked(tool: ToolDef) -> Handler:
    async def handler(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        _check_text(tool.name, arguments)
        try:
            return await tool.handler(arguments, ctx)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            where = exc.filename or f"a file under {home_text()}"  # tether writes nowhere else
            raise StorageError(
                f"{tool.name}: the file system refused tether's write to {where} ({exc.strerror}); "
                "free space there, or make it writable, and call again"
            ) from exc

    return handler


def _check_text(tool: str, arguments: Mapping[str, Any]) -> None:
    """``UsageError`` naming the first field whose name or string holds a lone surrogate. The
    message never shows the text: it may be a secret's value."""
    stack: list[tuple[str, Any]] = [("", arguments)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            bad = _lone_surrogate(value)
            if bad is not None:
                raise UsageError(
                    f"{tool}: field {path!r} is not Unicode text: its character {bad + 1} {_WHY}"
                )
        elif isinstance(value, Mapping):
            for key, item in value.items():
                name = str(key)
                bad = _lone_surrogate(name)
                if bad is not None:
                    where = f"in {path!r}" if path else "at the top level"
                    raise UsageError(
                        f"{tool}: a field name {where} is not Unicode text: its character {bad + 1} {_WHY}"
                    )
                stack.append((f"{path}.{name}" if path else name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))


_WHY = (
    "is a lone surrogate (a byte that was not UTF-8, from a command line or a file in another "
    "encoding, or an unpaired \\ud800-\\udfff escape); send UTF-8 text (iconv -t UTF-8 converts a file)"
)


def _lone_surrogate(text: str) -> int | None:
    """Where ``text`` first holds a lone surrogate, or ``None``."""
    if text.isascii():  # nearly every argument: no copy
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _bind(layer: Middleware, tool: ToolDef, inner: Handler) -> Handler:
    async def handler(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        return await layer(tool, arguments, ctx, inner)

    return handler


def argument_problem(name: Any, arguments: Any, registry: ToolRegistry) -> str | None:
    """Why ``arguments`` cannot be tool ``name``'s arguments at all — not an object (``None`` is
    ``{}``), or nested past ``MAX_ARGUMENT_DEPTH`` — as an ``INVALID_ARGUMENT`` message naming the
    tool, the field and what is allowed; else ``None``. Checked by ``ToolRegistry.call``, and by the
    MCP door before it (where the answer is a tool error the model reads)."""
    if arguments is None or isinstance(arguments, Mapping):
        field = _too_deep(arguments or {})
        if field is None:
            return None
        return (
            f"{name}: invalid arguments: field {field!r} nests arrays/objects more than "
            f"{MAX_ARGUMENT_DEPTH} levels deep; no parameter takes input nested that deep"
        )
    return (
        f"{name}: invalid arguments: 'arguments' must be a JSON object mapping parameter names to "
        f"values, got {_kind(arguments)}; {_allowed(name, registry)}"
    )


def _allowed(name: Any, registry: ToolRegistry) -> str:
    tool = registry.get(name) if isinstance(name, str) else None
    if tool is None:
        return "tools/list names the available tools and their parameters"
    properties = tool.input_schema.get("properties")
    fields = ", ".join(properties) if isinstance(properties, Mapping) else ""
    return f"allowed fields: {fields}" if fields else "this tool takes an empty object {}"


def _too_deep(arguments: Mapping[str, Any]) -> str | None:
    """The parameter holding the first container nested past the limit, or ``None``.

    Iterative (an explicit stack), so the check itself cannot exhaust the recursion limit.
    """
    stack: list[tuple[Any, str, int]] = [(v, str(k), 2) for k, v in arguments.items()]
    while stack:
        item, field, depth = stack.pop()
        if isinstance(item, Mapping):
            children: list[Any] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_ARGUMENT_DEPTH:
            return field
        stack.extend((v, field, depth + 1) for v in children if isinstance(v, dict | list))
    return None


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
