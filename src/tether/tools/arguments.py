"""Tool-argument validation at the model boundary.

Invariant: a model's bad input never becomes a traceback. ``parse_arguments`` validates the raw
argument object with a pydantic model (unknown fields forbidden) and turns every failure into one
``UsageError`` naming each offending field, what was wrong, and what is allowed.

Integer fields are typed ``JsonInt``: JSON Schema counts ``1500.0`` as an integer, so an integral
float is accepted (as ``1500``) while ``1500.5``, a boolean or a string is refused with the field
named — strict pydantic alone would refuse ``1500.0`` as "not a valid integer".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from tether.errors import UsageError

ModelT = TypeVar("ModelT", bound=BaseModel)


def _integral(value: object) -> object:
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise PydanticCustomError(
            "integer", "must be an integer (a whole number); got {value}", {"value": value}
        )
    return value  # ints pass; anything else is refused by the strict int check after this


JsonInt = Annotated[int, BeforeValidator(_integral)]

_SHOWN_DIGITS = 20


def shown(number: int) -> str:
    """``number`` as a message echoes it: whole up to 20 digits, else its first digits and its
    length (``1000000000000… (301 digits)``). JSON allows a 4,000-digit integer, and echoing it
    whole would bury the message (and the rest of the result) under it."""
    digits = str(abs(number))
    if len(digits) <= _SHOWN_DIGITS:
        return str(number)
    sign = "-" if number < 0 else ""
    return f"{sign}{digits[:12]}… ({len(digits)} digits)"


def parse_arguments(
    tool: str, model: type[ModelT], arguments: Mapping[str, Any], *, fields: Sequence[str] | None = None
) -> ModelT:
    """``arguments`` validated into ``model``, or a ``UsageError`` naming every problem.

    ``fields`` are the parameters the tool publishes, when its schema offers fewer than the model
    reads (a field the deployment refuses with its own message): an unknown field's message lists
    those, so that it never suggests one the tool would refuse."""
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        allowed = ", ".join(fields if fields is not None else [name_of(model, f) for f in model.model_fields])
        problems = [_describe(error, allowed) for error in exc.errors(include_url=False)]
        raise UsageError(f"{tool}: invalid arguments: " + "; ".join(problems)) from None


def name_of(model: type[BaseModel], field: str) -> str:
    alias = model.model_fields[field].alias
    return alias or field


def _describe(error: Any, allowed: str) -> str:
    field = ".".join(str(part) for part in error.get("loc", ())) or "(arguments)"
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        takes = f"allowed fields: {allowed}" if allowed else "this tool takes an empty object {}"
        return f"unknown field {field!r} ({takes})"
    if kind == "missing":
        return f"field {field!r} is required"
    message = str(error.get("msg", "is invalid"))
    return f"field {field!r}: {message[:1].lower()}{message[1:]}"
