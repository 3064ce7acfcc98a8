"""Typed reads of one JSON object of a tool call, with errors that name the field's full path.

Invariant: every value leaving a ``Fields`` reader has the declared type and lies in the declared
range; every failure is a ``UsageError`` whose message starts with the field's path
(``tasks[2].wait.timeoutMs``), says what was given and what is allowed. JSON ``null`` counts as
"not given" (several MCP clients send it for optional fields). Booleans are never numbers; an
integral float (``1500.0``) is an integer, as in JSON Schema.

Clamp or refuse: ``budget`` reads a number that only sizes what a call may spend (how long to
wait, how often to poll, how many lines to return or look back over). Past its range it is
clamped, and ``clamped_to`` notes say so (collected per call with ``collecting_clamps``); a
negative or fractional value is still refused. Every other number (``integer``) names something
— an exit code, a page position, a geometry, a count of shells — and is refused outside its range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from tether.errors import UsageError
from tether.tools.arguments import shown

T = TypeVar("T")
S = TypeVar("S", bound=str)


def describe(value: object) -> str:
    """A short JSON-flavoured description of ``value`` for "got …" in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int | float):
        return f"{shown(value) if isinstance(value, int) else repr(value)} (a number)"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return f"{text!r} (a string)"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def join(names: Iterable[str]) -> str:
    return ", ".join(names)


# The notes of the call being parsed: a context variable, so each parse (and each asyncio task)
# collects its own without every block parser passing a list down.
_CLAMPS: ContextVar[list[str] | None] = ContextVar("shell_args_clamps", default=None)


@contextmanager
def collecting_clamps() -> Iterator[list[str]]:
    """Collect the ``"PATH N clamped to M"`` notes of every ``budget`` read inside the block."""
    notes: list[str] = []
    token = _CLAMPS.set(notes)
    try:
        yield notes
    finally:
        _CLAMPS.reset(token)


class Fields:
    """The fields of one JSON object at ``path`` ("" for the call itself)."""

    __slots__ = ("path", "raw")

    def __init__(self, raw: object, path: str) -> None:
        if not isinstance(raw, Mapping):
            where = path or "arguments"
            raise UsageError(f"{where}: must be an object; got {describe(raw)}")
        self.raw: Mapping[str, Any] = raw
        self.path = path

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def get(self, name: str) -> Any:
        return self.raw.get(name)

    def unknown(self, allowed: Iterable[str]) -> list[str]:
        allowed_set = set(allowed)
        return [str(k) for k in self.raw if k not in allowed_set]

    def only(self, allowed: Sequence[str], *, context: str = "", hint: str = "") -> None:
        """Reject any field not in ``allowed``, listing the allowed ones (``context``: "for kind=x")."""
        extra = self.unknown(allowed)
        if not extra:
            return
        where = self.path or "arguments"
        scope = f" {context}" if context else ""
        listed = join(allowed) if allowed else "none"
        tail = f"; {hint}" if hint else ""
        raise UsageError(f"{where}: unknown field(s) {join(extra)}; allowed{scope}: {listed}{tail}")

    def fail(self, name: str, problem: str) -> UsageError:
        return UsageError(f"{self.at(name)}: {problem}")

    def integer(self, name: str, *, lo: int, hi: int, default: T, unit: str = "") -> int | T:
        value = self.raw.get(name)
        if value is None:
            return default
        units = f" ({unit})" if unit else ""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(name, f"must be an integer from {lo} to {hi}{units}; got {describe(value)}")
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise self.fail(name, f"must be an integer from {lo} to {hi}{units}; got {describe(value)}")
        number = int(value)
        if not lo <= number <= hi:
            raise self.fail(name, f"must be from {lo} to {hi}{units}; got {shown(number)}")
        return number

    def budget(
        self, name: str, *, lo: int, hi: int, default: T, unit: str = "", floor: int | None = None
    ) -> int | T:
        """An integer in ``lo..hi`` where a value above ``hi`` (or from ``floor`` up to ``lo``) is
        clamped into the range and noted; below ``floor`` (default ``lo``) it is refused."""
        value = self.raw.get(name)
        if value is None:
            return default
        least = lo if floor is None else floor
        units = f" ({unit})" if unit else ""
        allowed = f"an integer of at least {least}{units}; above {hi} is clamped to {hi}"
        if floor is not None and floor < lo:
            allowed += f", below {lo} to {lo}"
        integral = isinstance(value, int) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer()
        )
        if isinstance(value, bool) or not integral:
            raise self.fail(name, f"must be {allowed}; got {describe(value)}")
        number = int(value)
        if number < least:
            raise self.fail(name, f"must be {allowed}; got {shown(number)}")
        used = min(max(number, lo), hi)
        notes = _CLAMPS.get()
        if used != number and notes is not None:
            notes.append(f"{self.at(name)} {shown(number)} clamped to {used}")
        return used

    def required_integer(self, name: str, *, lo: int, hi: int, unit: str = "", why: str = "") -> int:
        result = self.integer(name, lo=lo, hi=hi, default=None, unit=unit)
        if result is None:
            raise self.missing(name, why)
        return result

    def number(self, name: str, *, lo: float, hi: float, unit: str = "") -> float | None:
        value = self.raw.get(name)
        if value is None:
            return None
        units = f" ({unit})" if unit else ""
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(name, f"must be a number from {lo:g} to {hi:g}{units}; got {describe(value)}")
        if not lo <= value <= hi:
            raise self.fail(name, f"must be from {lo:g} to {hi:g}{units}; got {value!r}")
        return float(value)

    def boolean(self, name: str, *, default: bool) -> bool:
        value = self.raw.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(name, f"must be a boolean (true or false); got {describe(value)}")
        return value

    def string(
        self, name: str, *, max_len: int | None = None, non_blank: bool = False, what: str = "a string"
    ) -> str | None:
        value = self.raw.get(name)
        if value is None:
            return None
        limit = f" of at most {max_len} characters" if max_len is not None else ""
        if not isinstance(value, str):
            raise self.fail(name, f"must be {what}{limit}; got {describe(value)}")
        if non_blank and not value.strip():
            raise self.fail(name, f"must be {what}{limit} that is not empty or blank; got {value!r}")
        if max_len is not None and len(value) > max_len:
            raise self.fail(name, f"must be at most {max_len} characters; got {len(value)}")
        return value

    def required_string(
        self,
        name: str,
        *,
        max_len: int | None = None,
        non_blank: bool = True,
        what: str = "a string",
        why: str = "",
    ) -> str:
        result = self.string(name, max_len=max_len, non_blank=non_blank, what=what)
        if result is None:
            raise self.missing(name, why)
        return result

    def enum(self, name: str, values: Sequence[S], *, default: T) -> S | T:
        value = self.raw.get(name)
        if value is None:
            return default
        for allowed in values:
            if value == allowed:
                return allowed
        raise self.fail(name, f"must be one of {join(values)}; got {describe(value)}")

    def required_enum(self, name: str, values: Sequence[S], *, why: str = "") -> S:
        result = self.enum(name, values, default=None)
        if result is None:
            raise self.missing(name, f"one of {join(values)}" + (f"; {why}" if why else ""))
        return result

    def string_list(self, name: str, *, what: str) -> tuple[str, ...]:
        value = self.raw.get(name)
        if value is None:
            return ()
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"must be an array of {what}; got {describe(value)}")
        return tuple(value)

    def missing(self, name: str, why: str = "") -> UsageError:
        return self.fail(name, "required" + (f" ({why})" if why else ""))
