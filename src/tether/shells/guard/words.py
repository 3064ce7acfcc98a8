"""Bash words as the dangerous-command guard sees them: literal values after quote removal.

Invariant: a ``Word`` never claims to know more than the text says. Every part only run time can
decide (a variable other than ``HOME``, ``$(…)``, ``<(…)``, ``$((…))``) marks the word dynamic;
its ``value`` is then what the word becomes when each unknown part expands to nothing (or to the
default of ``${X:-default}``), which is exactly the case that turns ``rm -rf "$DIR"/`` into
``rm -rf /``. ``$HOME`` and ``${HOME}`` are known: they read as ``~``.

The parser is cached per thread (a tree-sitter ``Parser`` is not safe to share between threads);
parsing is the only thing this module does besides string work — no I/O.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser, Tree

from tether.shells.guard.expansion import expansion_value
from tether.shells.guard.scope import Scope, split_fields

_LANGUAGE = Language(tree_sitter_bash.language())
_local = threading.local()

# Node types whose value only run time knows.
_RUNTIME = frozenset({"command_substitution", "process_substitution", "arithmetic_expansion"})


def parse(code: str) -> Tree:
    """Parse bash source with this thread's cached parser."""
    return parse_bytes(code.encode("utf-8", "replace"))


def parse_bytes(code: bytes) -> Tree:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = Parser(_LANGUAGE)
        _local.parser = parser
    return parser.parse(code)


def text_of(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Word:
    """One shell word: ``value`` after quote removal, ``code`` as a nested shell would read it.

    ``code`` keeps every unknown part as its source text (``$X``, ``$(curl …)``), so re-parsing
    it (for ``bash -c``, ``eval``) judges the unknown parts again instead of losing them.
    """

    value: str
    code: str
    dynamic: bool = False
    node: Node | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def literal(value: str) -> Word:
        return Word(value=value, code=value)


class _Parts:
    """A word being collected: its fields so far (unquoted expansions split on IFS)."""

    __slots__ = ("code", "dynamic", "fields", "hidden", "quoted", "scope", "solid", "value")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.value: list[str] = []
        self.code: list[str] = []
        self.dynamic = False
        self.solid = False  # the current field holds literal or quoted text (survives being empty)
        self.quoted = 0
        self.hidden = False  # an expansion was split on an IFS only run time knows
        self.fields: list[tuple[str, str, bool]] = []

    def lit(self, text: str) -> None:
        self.value.append(text)
        self.code.append(text)
        self.solid = True

    def unknown(self, source: str, fill: str = "") -> None:
        self.value.append(fill)
        self.code.append(source)
        self.dynamic = True
        self.solid = True

    def end_field(self) -> None:
        if self.solid or (self.value and "".join(self.value)):
            self.fields.append(("".join(self.value), "".join(self.code), self.dynamic))
        self.value, self.code, self.dynamic, self.solid = [], [], False, False

    def expanded(self, source: str, values: tuple[str, ...], *, separate: bool) -> None:
        """Known values of an expansion: one field each when ``separate`` (``"$@"``)."""
        if self.quoted:
            self.solid = True
            for index, value in enumerate(values):
                if index and separate:
                    self.end_field()
                    self.solid = True
                self.value.append(value if separate or index == 0 else " " + value)
                self.code.append(source if index == 0 else value)
            return
        ifs = self.scope.ifs()
        if ifs is None:
            self.hidden = self.hidden or any(values)
            self.unknown(source)
            return
        first = True
        for index, value in enumerate(values):
            if index:
                self.end_field()
            if value and value[0] in ifs:
                self.end_field()
            for n, piece in enumerate(split_fields(value, ifs)):
                if n:
                    self.end_field()
                self.value.append(piece)
                self.code.append(source if first else piece)
                first = False
            if value and value[-1] in ifs:
                self.end_field()
        if first:
            self.code.append(source)

    def words(self, node: Node) -> list[Word]:
        self.end_field()
        return [Word(value=v, code=c, dynamic=d, node=node) for v, c, d in self.fields]


_NO_VARS: Mapping[str, str] = {}
Known = Scope | Mapping[str, str]


def _as_scope(known: Known) -> Scope:
    return known if isinstance(known, Scope) else Scope(known)


def resolve(node: Node, known: Known = _NO_VARS) -> Word:
    """The word a node stands for (``command_name``, an argument, a redirect target), its fields
    joined by spaces.

    ``known`` holds variables a literal assignment earlier in the same text set (``X=/``), or a
    whole ``Scope`` (the shell's own state).
    """
    fields = resolve_fields(node, known)
    if len(fields) == 1:
        return fields[0]
    return Word(
        value=" ".join(w.value for w in fields),
        code=text_of(node) if fields else "",
        dynamic=any(w.dynamic for w in fields),
        node=node,
    )


def resolve_fields(node: Node, known: Known = _NO_VARS, *, hidden: list[bool] | None = None) -> list[Word]:
    """The words bash makes of ``node`` after expansion and word splitting (an unquoted ``$X``
    holding ``a /etc`` is two words; an empty one is none)."""
    parts = _Parts(_as_scope(known))
    _collect(node, parts)
    if hidden is not None and parts.hidden:
        hidden.append(True)
    return parts.words(node)


def _collect(node: Node, parts: _Parts) -> None:
    kind = node.type
    if kind == "word":
        parts.lit(_unescape_bare(text_of(node)))
    elif kind == "raw_string":
        parts.lit(text_of(node)[1:-1])
    elif kind == "ansi_c_string":
        parts.lit(decode_ansi_c(text_of(node)[2:-1]))
    elif kind == "string":
        parts.quoted += 1
        parts.solid = True
        try:
            _collect_container(node, parts, _unescape_double, skip_quotes=True)
        finally:
            parts.quoted -= 1
    elif kind in ("concatenation", "command_name", "translated_string"):
        _collect_container(node, parts, _unescape_bare, skip_quotes=False)
    elif kind in ("simple_expansion", "expansion"):
        _collect_expansion(node, parts)
    elif kind == "$":
        parts.lit("$")
    elif kind == "command_substitution" and (printed := _printed(node, parts.scope)) is not None:
        if parts.quoted:
            parts.value.append(printed)
            parts.code.append(text_of(node))
            parts.solid = True
        else:
            parts.expanded(text_of(node), (printed,), separate=False)
    elif kind in _RUNTIME or node.named_child_count or kind == "ERROR":
        parts.unknown(text_of(node))
    else:
        # number, brace_expression, string_content, heredoc text, …: literal leaves.
        parts.lit(text_of(node))


def _collect_container(
    node: Node, parts: _Parts, unescape: Callable[[str], str], *, skip_quotes: bool
) -> None:
    base = node.start_byte
    raw = node.text or b""
    cursor = base
    for child in node.children:
        if child.start_byte > cursor:
            parts.lit(unescape(raw[cursor - base : child.start_byte - base].decode("utf-8", "replace")))
        cursor = child.end_byte
        if skip_quotes and child.type == '"':
            continue
        if child.type == "string_content":
            parts.lit(unescape(text_of(child)))
        elif node.type == "translated_string" and child.type == "$":
            continue
        else:
            _collect(child, parts)
    if node.end_byte > cursor:
        parts.lit(unescape(raw[cursor - base :].decode("utf-8", "replace")))


def _collect_expansion(node: Node, parts: _Parts) -> None:
    source = text_of(node)
    found = expansion_value(node, parts.scope, lambda words: _fallback(words, parts.scope))
    if found.values is None:
        parts.unknown(source, found.fill)
    else:
        parts.expanded(source, found.values, separate=found.separate)


def _fallback(nodes: list[Node], scope: Scope) -> str:
    sub = _Parts(scope)
    sub.quoted = 1  # the word of ${X:-word} is not split until the whole expansion is
    for child in nodes:
        _collect(child, sub)
    return "".join(sub.value)


def _printed(node: Node, known: Scope) -> str | None:
    """What ``$(echo WORDS)`` / ``$(printf WORD)`` prints, when its words are literal."""
    commands = node.named_children
    if len(commands) != 1 or commands[0].type != "command":
        return None
    command = commands[0]
    name = command.child_by_field_name("name")
    args = [w for a in command.children_by_field_name("argument") for w in resolve_fields(a, known)]
    if name is None or any(a.dynamic for a in args):
        return None
    program = resolve(name, known).value
    if program == "echo" and not any(a.value.startswith("-") for a in args):
        return " ".join(a.value for a in args)
    if program == "printf" and len(args) == 1 and "%" not in args[0].value and "\\" not in args[0].value:
        return args[0].value
    return None


_BARE_ESCAPE = re.compile(r"\\(\n|.)", re.DOTALL)
_DOUBLE_ESCAPE = re.compile(r"\\([$`\"\\\n])")


def _unescape_bare(text: str) -> str:
    return _BARE_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _unescape_double(text: str) -> str:
    return _DOUBLE_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)


def decode_ansi_c(body: str) -> str:
    """Decode the escapes of ``$'…'`` (also what ``printf`` and ``echo -e`` do to a format)."""

    def one(match: re.Match[str]) -> str:
        esc = match.group(1)
        head = esc[0]
        if head in "xuU" and len(esc) > 1:
            return chr(min(int(esc[1:], 16), 0x10FFFF))
        if head.isdigit():
            return chr(int(esc, 8) & 0xFF)
        if head == "c" and len(esc) == 2:
            return chr(ord(esc[1]) & 0x1F)
        return _ANSI_SIMPLE.get(esc, "\\" + esc)

    return _ANSI_ESCAPE.sub(one, body)


def expand_braces(text: str, limit: int = 64) -> list[str]:
    """Bash brace expansion of comma lists (``/{etc,usr}`` → ``/etc /usr``), bounded by ``limit``."""
    out: list[str] = []
    pending = [text]
    while pending and len(out) < limit:
        item = pending.pop()
        span = _first_brace_list(item)
        if span is None:
            out.append(item)
            continue
        start, end, options = span
        pending.extend(item[:start] + option + item[end + 1 :] for option in reversed(options))
    return out or [text]


def _first_brace_list(text: str) -> tuple[int, int, list[str]] | None:
    for start, char in enumerate(text):
        if char != "{":
            continue
        depth = 0
        options: list[str] = []
        begin = start + 1
        for index in range(start, len(text)):
            current = text[index]
            if current == "{":
                depth += 1
            elif current == "}":
                depth -= 1
                if depth == 0:
                    if options:
                        options.append(text[begin:index])
                        return start, index, options
                    break
            elif current == "," and depth == 1:
                options.append(text[begin:index])
                begin = index + 1
    return None
