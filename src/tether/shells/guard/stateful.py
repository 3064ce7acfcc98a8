"""Commands that change what later commands mean: assignments, declarations, and the builtins that
store values or code for later.

Invariant: every way the text can set a variable the walk reads (``X=…``, ``declare``/``local``/
``export``, ``printf -v``, ``read``, ``mapfile``, ``for``, ``${X:=…}``, a nameref) updates the
``WalkState`` with the value when the text shows it, and marks the name unknown when it does not.
Every way it can store code the shell runs later — ``PROMPT_COMMAND`` (any element, ``+=``,
through a nameref), the prompt strings ``PS0``/``PS1``/``PS2``/``PS4`` (their ``$(…)``),
``trap``, ``alias``, ``bind -x`` and readline macros, ``complete -C``, ``mapfile -C`` — has that
code walked now; stored code the text does not show (an unknown value, a name only run time
knows) is a ``Hidden`` event, which the guard refuses.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tree_sitter import Node

from tether.shells.guard.argv import OptSpec, first_operand, option_values
from tether.shells.guard.events import Event, Hidden
from tether.shells.guard.feed import printf_text
from tether.shells.guard.scope import split_fields
from tether.shells.guard.shellstate import prompt_code
from tether.shells.guard.words import Word, resolve, resolve_fields, text_of

if TYPE_CHECKING:
    from tether.shells.guard.walkstate import WalkState

Reparser = Callable[[Word, str], Iterator[Event]]
Walker = Callable[[Node], Iterator[Event]]

CODE_VARS = frozenset({"PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS4"})
BUILTINS = frozenset({"printf", "read", "mapfile", "readarray", "bind", "complete", "compgen"})
BUILTINS |= {"alias", "unalias", "hash"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_READ = OptSpec(with_arg="adinNptu")
_MAPFILE = OptSpec(with_arg="dnOsuCc")
_BIND = OptSpec(with_arg="mqurfx")
_COMPLETE = OptSpec(with_arg="oAGWFCXPSabcdefgjksuvE")


def _target(state: WalkState, name: str) -> str:
    """The variable a name stands for, through namerefs (``declare -n r=PROMPT_COMMAND``)."""
    for _ in range(8):
        found = state.namerefs.get(name)
        if found is None:
            return name
        name = found
    return name


def _store(var: str, word: Word, reparse: Reparser, text: str) -> Iterator[Event]:
    """Code stored in ``var`` is walked now (a prompt string: its substitutions)."""
    base = var.split("[", 1)[0]
    if base not in CODE_VARS:
        return
    code = word.value if not word.dynamic else word.code
    if base != "PROMPT_COMMAND":
        code = prompt_code(code)
    yield from reparse(Word(value=code, code=code, dynamic=word.dynamic), text)


def assignment(
    node: Node, state: WalkState, reparse: Reparser, walk: Walker, *, nameref: bool
) -> Iterator[Event]:
    for child in node.named_children:
        yield from walk(child)
    name_node, value_node = node.child_by_field_name("name"), node.child_by_field_name("value")
    if name_node is None:
        return
    index: str | None = None
    if name_node.type == "subscript":
        inner = name_node.child_by_field_name("name")
        index_node = name_node.child_by_field_name("index")
        index = text_of(index_node) if index_node is not None else ""
        base = text_of(inner) if inner is not None else text_of(name_node)
    else:
        base = text_of(name_node)
    appending = any(c.type == "+=" for c in node.children)
    scope = state.scope
    if nameref:
        state.namerefs[base] = resolve(value_node, scope).value if value_node is not None else ""
        return
    target = _target(state, base)
    text = text_of(node)
    if value_node is not None and value_node.type == "array":
        elements = [w for element in value_node.named_children for w in resolve_fields(element, scope)]
        values: tuple[str, ...] | None = tuple(w.value for w in elements)
        if any(w.dynamic for w in elements):
            values = None
        elif appending:
            before = scope.values(target)
            values = None if before is None or values is None else (*before, *values)
        scope.assign_array(target, values)
        for word in elements:
            yield from _store(target, word, reparse, text)
        return
    word = resolve(value_node, scope) if value_node is not None else Word.literal("")
    if index is not None:
        old_values = scope.values(target)
        if old_values is None or not index.isdigit() or word.dynamic:
            scope.assign_array(target, None)
        else:
            padded = list(old_values) + [""] * max(0, int(index) + 1 - len(old_values))
            padded[int(index)] = word.value
            scope.assign_array(target, tuple(padded))
    elif appending:
        prior = scope.value(target)
        scope.assign(target, None if prior is None or word.dynamic else prior + word.value)
    else:
        scope.assign(target, None if word.dynamic else word.value)
    yield from _store(target, word, reparse, text)


def declaration(node: Node, state: WalkState, reparse: Reparser, walk: Walker) -> Iterator[Event]:
    """``declare``/``typeset``/``local``/``export``/``readonly``: flags, assignments, and words that
    become assignments once expanded (``declare "$n=$v"``)."""
    keyword = node.children[0].type if node.children else "declare"
    flags = ""
    for child in node.named_children:
        raw = text_of(child)
        if child.type == "variable_assignment":
            yield from assignment(child, state, reparse, walk, nameref="n" in flags)
            continue
        if child.type == "word" and raw[:1] in "-+" and len(raw) > 1:
            flags += raw[1:]
            continue
        yield from walk(child)
        word = resolve(child, state.scope)
        if word.dynamic:
            yield Hidden(
                why=f"{keyword} {word.code} names or assigns a variable only run time knows",
                text=text_of(node),
            )
        elif "=" in word.value and "f" not in flags:
            name, _, value = word.value.partition("=")
            literal = Word.literal(value)
            if "n" in flags:
                state.namerefs[name] = value
            else:
                state.scope.assign(_target(state, name.removesuffix("+")), value)
                yield from _store(_target(state, name), literal, reparse, text_of(node))


def unset(node: Node, state: WalkState) -> None:
    functions = False
    for child in node.named_children:
        raw = text_of(child)
        if raw.startswith("-"):
            functions = functions or "f" in raw
            continue
        name = resolve(child, state.scope).value
        if functions:
            state.functions.pop(name, None)
        else:
            state.namerefs.pop(name, None)
            state.scope.unset(name.split("[", 1)[0])


def builtin(
    name: str, argv: tuple[Word, ...], text: str, state: WalkState, reparse: Reparser, stdin: str | None
) -> Iterator[Event]:
    args = argv[1:]
    if name == "printf":
        yield from _printf(args, text, state, reparse)
    elif name == "read":
        yield from _read(args, text, state, reparse, stdin)
    elif name in ("mapfile", "readarray"):
        yield from _mapfile(args, text, state, reparse, stdin)
    elif name == "bind":
        yield from _bind(args, text, reparse)
    elif name in ("complete", "compgen"):
        for code in option_values(args, "C", (), _COMPLETE):
            yield from reparse(code, text)
    elif name == "alias":
        for word in args:
            key, eq, value = word.value.partition("=")
            if eq:
                state.aliases[key] = value
    elif name == "unalias":
        if any(w.value == "-a" for w in args):
            state.aliases.clear()
        for word in args:
            state.aliases.pop(word.value, None)
    elif name == "hash":
        yield from _hash(args, text, state)


def _assign_checked(
    var: Word, value: str | None, text: str, state: WalkState, reparse: Reparser, *, what: str
) -> Iterator[Event]:
    if var.dynamic or not _NAME.fullmatch(var.value.split("[", 1)[0]):
        yield Hidden(why=f"{what} assigns a variable whose name only run time knows ({var.code})", text=text)
        return
    target = _target(state, var.value)
    state.scope.assign(target, value)
    if target.split("[", 1)[0] in CODE_VARS:
        if value is None:
            yield Hidden(why=f"{what} stores code only run time knows in {target}", text=text)
        else:
            yield from _store(target, Word.literal(value), reparse, text)


def _printf(args: tuple[Word, ...], text: str, state: WalkState, reparse: Reparser) -> Iterator[Event]:
    spec = OptSpec(with_arg="v")
    targets = option_values(args, "v", (), spec)
    if not targets:
        return
    rest = list(args[first_operand(args, spec) :])
    value = printf_text(rest) if not any(w.dynamic for w in rest) else None
    yield from _assign_checked(targets[-1], value, text, state, reparse, what="printf -v")


def _read(
    args: tuple[Word, ...], text: str, state: WalkState, reparse: Reparser, stdin: str | None
) -> Iterator[Event]:
    arrays = option_values(args, "a", (), _READ)
    names = list(args[first_operand(args, _READ) :]) or ([] if arrays else [Word.literal("REPLY")])
    from_fd = bool(option_values(args, "u", (), _READ))
    line = None if stdin is None or from_fd else stdin.split("\n", 1)[0]
    ifs = state.scope.ifs()
    fields = split_fields(line, ifs) if line is not None and ifs is not None else None
    for array in arrays:
        if array.dynamic:
            yield Hidden(
                why=f"read -a assigns an array whose name only run time knows ({array.code})", text=text
            )
            continue
        state.scope.assign_array(_target(state, array.value), tuple(fields) if fields is not None else None)
        if _target(state, array.value) in CODE_VARS:
            for element in fields if fields is not None else [None]:
                if element is None:
                    yield Hidden(why=f"read stores code only run time knows in {array.value}", text=text)
                else:
                    yield from _store(array.value, Word.literal(element), reparse, text)
    for position, var in enumerate(names):
        if fields is None:
            value = None
        elif position == len(names) - 1:
            value = " ".join(fields[position:])
        else:
            value = fields[position] if position < len(fields) else ""
        yield from _assign_checked(var, value, text, state, reparse, what="read")


def _mapfile(
    args: tuple[Word, ...], text: str, state: WalkState, reparse: Reparser, stdin: str | None
) -> Iterator[Event]:
    for callback in option_values(args, "C", (), _MAPFILE):
        yield from reparse(callback, text)
    operands = list(args[first_operand(args, _MAPFILE) :])
    var = operands[0] if operands else Word.literal("MAPFILE")
    if var.dynamic:
        yield Hidden(why=f"mapfile assigns an array whose name only run time knows ({var.code})", text=text)
        return
    lines = tuple(stdin.split("\n")) if stdin is not None else None
    target = _target(state, var.value)
    state.scope.assign_array(target, lines)
    if target in CODE_VARS:
        if lines is None:
            yield Hidden(why=f"mapfile stores code only run time knows in {target}", text=text)
        else:
            for element in lines:
                yield from _store(target, Word.literal(element), reparse, text)


_MACRO_ESCAPES = re.compile(r"\\(C-[mMjJ]|[nr])")


def _bind(args: tuple[Word, ...], text: str, reparse: Reparser) -> Iterator[Event]:
    """``bind -x KEYS:CODE`` runs CODE on a key press; a macro ``"KEYS": "TEXT"`` types TEXT, and
    a newline in it (``\\n``, ``\\C-m``) runs the line."""
    for code in option_values(args, "x", (), _BIND):
        if code.dynamic:
            yield Hidden(why=f"bind -x binds a key to code only run time knows ({code.code})", text=text)
            continue
        yield from reparse(Word.literal(_binding_value(code.value)), text)
    for word in args[first_operand(args, _BIND) :]:
        if word.dynamic:
            yield Hidden(why=f"bind defines a key binding only run time knows ({word.code})", text=text)
            continue
        value = _binding_value(word.value)
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            typed = _MACRO_ESCAPES.sub("\n", value[1:-1])
            yield from reparse(Word.literal(typed), text)


def _binding_value(binding: str) -> str:
    """The part after ``KEYSEQ:`` (the key sequence may be quoted and hold a colon)."""
    if binding.startswith('"'):
        end = binding.find('"', 1)
        while end > 0 and binding[end - 1] == "\\":
            end = binding.find('"', end + 1)
        rest = binding[end + 1 :] if end > 0 else ""
    else:
        rest = binding[binding.find(":") :] if ":" in binding else ""
    value = rest.lstrip().removeprefix(":").strip()
    if value.startswith('"') and value.endswith('"') and len(value) >= 2 and "-x" not in binding:
        return value
    return value.strip('"') if value.startswith('"') else value


def _hash(args: tuple[Word, ...], text: str, state: WalkState) -> Iterator[Event]:
    """``hash -p /bin/rm ls`` makes ``ls`` run /bin/rm: remember it as an alias of that path."""
    paths = option_values(args, "p", (), OptSpec(with_arg="pdt"))
    names = args[first_operand(args, OptSpec(with_arg="pdt")) :]
    for path in paths[-1:]:
        for name in names:
            if path.dynamic or name.dynamic:
                yield Hidden(why="hash -p maps a command name to a program only run time knows", text=text)
            elif posixpath.basename(path.value) != name.value:
                state.aliases[name.value] = path.value
