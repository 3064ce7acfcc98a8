"""Request parameters a model or client got wrong, answered with the field and what is allowed.

Invariants (on every transport, for every method):

- ``tools/call`` whose ``arguments`` is not an object, or nests deeper than ``MAX_ARGUMENT_DEPTH``,
  gets a tool error (``isError``) naming the tool, the field and what is allowed (``argument_problem``
  of ``tether.tools.registry``, which every door's call passes) — the model can
  correct itself, exactly as for any other argument error — never the SDK's bare
  ``-32602 Invalid request parameters``.
- Any other parameter the SDK's models refuse is answered with ``-32602`` whose message names the
  method, the field and what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from tether.tools.registry import ToolRegistry, argument_problem


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
    problem = argument_problem(name, params.get("arguments"), registry)
    return None if problem is None else tool_error(f"INVALID_ARGUMENT: {problem}")


def named_invalid_params(method: str, exc: ValidationError) -> MCPError:
    """``-32602`` naming the method, the first offending field and the problem."""
    problems = []
    for error in exc.errors(include_url=False)[:3]:
        field = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "is invalid"))
        problems.append(f"field {field!r}: {message}" if field else message)
    detail = "; ".join(problems) or "the parameters do not match the method's schema"
    return MCPError(INVALID_PARAMS, f"Invalid params for {method}: {detail}")
