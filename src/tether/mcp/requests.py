"""Request parameters a model or client got wrong, answered with the field and what is allowed.

Invariants (on every transport, for every method):

- ``tools/call`` whose ``arguments`` is not an object, or nests deeper than ``MAX_ARGUMENT_DEPTH``,
  gets a tool error (``isError``) naming the tool, the field and what is allowed — the model can
  correct itself, exactly as for any other argument error — never the SDK's bare
  ``-32602 Invalid request parameters``.
- Any other parameter the SDK's models refuse is answered with ``-32602`` whose message names the
  method, the field and what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from tether.tools.registry import ToolRegistry

# No tool takes arguments nested more than a few levels; deeper input is a mistake or an attack
# on the recursion of whatever reads it, and is refused before any tool code runs.
MAX_ARGUMENT_DEPTH: Final = 32


def tool_error(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` (wire form) that is a tool error."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def check_call(params: Mapping[str, Any] | None, registry: ToolRegistry) -> dict[str, Any] | None:
    """The tool error for ``tools/call`` params whose arguments are unusable, else ``None``."""
    if not isinstance(params, Mapping):
        return None  # absent params: the SDK names the missing 'name'
    name = params.get("name")
    if not isinstance(name, str):
        names = ", ".join(sorted(t.name for t in registry.list())) or "(none)"
        raise MCPError(
            INVALID_PARAMS, f"tools/call: field 'name' must be a string naming a tool; available: {names}"
        )
    arguments = params.get("arguments")
    if arguments is None or isinstance(arguments, Mapping):
        field = _too_deep(arguments or {})
        if field is None:
            return None
        return tool_error(
            f"INVALID_ARGUMENT: {name}: invalid arguments: field {field!r} nests arrays/objects more "
            f"than {MAX_ARGUMENT_DEPTH} levels deep; no parameter takes input nested that deep"
        )
    return tool_error(
        f"INVALID_ARGUMENT: {name}: invalid arguments: 'arguments' must be a JSON object mapping "
        f"parameter names to values, got {_kind(arguments)}; {_allowed(name, registry)}"
    )


def _allowed(name: str, registry: ToolRegistry) -> str:
    tool = registry.get(name)
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


def named_invalid_params(method: str, exc: ValidationError) -> MCPError:
    """``-32602`` naming the method, the first offending field and the problem."""
    problems = []
    for error in exc.errors(include_url=False)[:3]:
        field = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "is invalid"))
        problems.append(f"field {field!r}: {message}" if field else message)
    detail = "; ".join(problems) or "the parameters do not match the method's schema"
    return MCPError(INVALID_PARAMS, f"Invalid params for {method}: {detail}")


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
