"""Parameter expansion (``$X``, ``${X…}``) evaluated on what a ``Scope`` knows.

Invariant: an expansion yields values only when every part of it is known: the variable, the
operator's word and the operator itself (``:-``, ``:=``, ``:+``, ``#``, ``##``, ``%``, ``%%``,
``/``, ``//``, ``^^``, ``,,``, ``:offset:length``, ``!name``, ``#name``, arrays and ``$@``).
Otherwise it is unknown, with ``fill`` the value the rules judge it by (``${X:-/}`` by its default,
anything else by nothing), which is how ``rm -rf "$STEAMROOT/"*`` reads as ``rm -rf /*``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import translate

from tree_sitter import Node

from tether.shells.guard.scope import Scope

_NAMES = ("variable_name", "special_variable_name")
_DEFAULTING = frozenset({":-", "-", ":=", "="})
_ALTERNATE = frozenset({":+", "+"})
_ERRORING = frozenset({":?", "?"})
_REMOVE = frozenset({"#", "##", "%", "%%"})
_REPLACE = frozenset({"/", "//", "/#", "/%"})
_CASE = frozenset({"^", "^^", ",", ",,"})
_MAX_PATTERN_VALUE = 1024  # pattern operators try every split point: bound the work


@dataclass(frozen=True, slots=True, kw_only=True)
class Expanded:
    values: tuple[str, ...] | None  # None: only run time knows
    fill: str = ""  # what an unknown expansion is judged as
    separate: bool = False  # "$@" / "${a[@]}": one word per value even inside quotes


_UNKNOWN = Expanded(values=None)


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


def expansion_value(node: Node, scope: Scope, fallback: Callable[[list[Node]], str]) -> Expanded:
    """The value of one ``simple_expansion`` / ``expansion`` node."""
    named = node.named_children
    tokens = [c.type for c in node.children if not c.is_named]
    subscript = next((c for c in named if c.type == "subscript"), None)
    names = [c for c in named if c.type in _NAMES]
    if subscript is not None:
        return _subscript(subscript, scope, length="#" in tokens[:2])
    if not names:
        return _UNKNOWN
    name = _text(names[0])
    if "!" in tokens[:2]:
        return _indirect(node, name, scope)
    if "#" in tokens[:2] and len(named) == 1:
        value = scope.value(name)
        return Expanded(values=(str(len(value)),)) if value is not None else _UNKNOWN
    if len(named) == 1:
        if name in ("@", "*"):
            values = scope.values(name)
            return Expanded(values=values, separate=name == "@") if values is not None else _UNKNOWN
        value = scope.value(name)
        return Expanded(values=(value,)) if value is not None else _UNKNOWN
    operator = node.child_by_field_name("operator")
    op = _text(operator).strip() if operator is not None else ""
    after = [c for c in named[1:] if operator is None or c.start_byte >= operator.end_byte]
    return _operator(name, op, after, node, scope, fallback)


def _subscript(subscript: Node, scope: Scope, *, length: bool) -> Expanded:
    name_node = subscript.child_by_field_name("name") or next(
        (c for c in subscript.named_children if c.type in _NAMES), None
    )
    index_node = subscript.child_by_field_name("index")
    if name_node is None or index_node is None:
        return _UNKNOWN
    name, index = _text(name_node), _text(index_node)
    values = scope.values(name)
    if values is None:
        return _UNKNOWN
    if index in ("@", "*"):
        if length:
            return Expanded(values=(str(len(values)),))
        return Expanded(values=values, separate=index == "@")
    if index.isdigit():
        element = values[int(index)] if int(index) < len(values) else ""
        return Expanded(values=(str(len(element)),) if length else (element,))
    return _UNKNOWN


def _indirect(node: Node, name: str, scope: Scope) -> Expanded:
    if len(node.named_children) != 1:
        return _UNKNOWN  # ${!prefix@}, ${!name[@]}: names, not values
    target = scope.value(name)
    if target is None or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+", target):
        return _UNKNOWN
    value = scope.value(target)
    return Expanded(values=(value,)) if value is not None else _UNKNOWN


def _operator(
    name: str, op: str, after: list[Node], node: Node, scope: Scope, fallback: Callable[[list[Node]], str]
) -> Expanded:
    value = scope.value(name)
    if op in _DEFAULTING:
        word = fallback(after)
        if value is None:
            return Expanded(values=None, fill=word)
        chosen = value if value else word
        if op in (":=", "=") and not value:
            scope.assign(name, word)
        return Expanded(values=(chosen,))
    if op in _ALTERNATE:
        if value is None:
            return _UNKNOWN
        return Expanded(values=(fallback(after) if value else "",))
    if op in _ERRORING:
        return Expanded(values=(value,)) if value is not None else _UNKNOWN
    if value is None or (len(value) > _MAX_PATTERN_VALUE and (op in _REMOVE or op in _REPLACE)):
        return _UNKNOWN
    if op in _REMOVE:
        return Expanded(values=(_remove(value, fallback(after), op),))
    if op in _REPLACE:
        pattern = fallback(after[:1])
        replacement = fallback(after[1:2]) if len(after) > 1 else ""
        return Expanded(values=(_replace(value, pattern, replacement, op),))
    if op in _CASE:
        upper = op.startswith("^")
        if len(op) == 2:
            return Expanded(values=(value.upper() if upper else value.lower(),))
        head = value[:1].upper() if upper else value[:1].lower()
        return Expanded(values=(head + value[1:],))
    if op == ":":
        return _substring(value, after)
    return _UNKNOWN


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(translate(pattern).removesuffix(r"\Z").removeprefix("(?s:").removesuffix(")"), re.S)


def _remove(value: str, pattern: str, op: str) -> str:
    rx = _glob(pattern)
    spans = range(len(value) + 1)
    if op.startswith("#"):
        ends = [n for n in spans if rx.fullmatch(value[:n])]
        if not ends:
            return value
        return value[(max(ends) if op == "##" else min(ends)) :]
    starts = [n for n in spans if rx.fullmatch(value[n:])]
    if not starts:
        return value
    return value[: (min(starts) if op == "%%" else max(starts))]


def _replace(value: str, pattern: str, replacement: str, op: str) -> str:
    if not pattern:
        return value
    rx = _glob(pattern)
    if op == "/#":
        match = max((n for n in range(len(value) + 1) if rx.fullmatch(value[:n])), default=None)
        return value if match is None else replacement + value[match:]
    if op == "/%":
        match = min((n for n in range(len(value) + 1) if rx.fullmatch(value[n:])), default=None)
        return value if match is None else value[:match] + replacement
    out: list[str] = []
    index = 0
    while index <= len(value):
        end = max((n for n in range(index + 1, len(value) + 1) if rx.fullmatch(value[index:n])), default=None)
        if end is None:
            if index < len(value):
                out.append(value[index])
            index += 1
            continue
        out.append(replacement)
        out.append(value[end:] if op == "/" else "")
        if op == "/":
            return "".join(out)
        index = end
    return "".join(out)


def _substring(value: str, after: list[Node]) -> Expanded:
    numbers = [_text(n).strip() for n in after]
    try:
        offset = int(numbers[0]) if numbers else 0
        length = int(numbers[1]) if len(numbers) > 1 else None
    except ValueError:
        return _UNKNOWN
    start = offset if offset >= 0 else max(0, len(value) + offset)
    if length is None:
        return Expanded(values=(value[start:],))
    end = start + length if length >= 0 else len(value) + length
    return Expanded(values=(value[start:end],))
