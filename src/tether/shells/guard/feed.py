"""What text shows about a command's input, and code stored for later — read from words alone.

Invariant: these helpers only read literal text (``echo``/``printf`` words, heredoc bodies,
``alias``/``trap`` bodies, ``cd`` targets); anything dynamic yields ``None`` or "unknown", never
a guess.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from tether.shells.guard.argv import command_name, find_parts
from tether.shells.guard.events import Feeder
from tether.shells.guard.words import Word, decode_ansi_c, resolve, text_of


def redirect_text(redirect: Node) -> str | None:
    if redirect.type == "heredoc_redirect":
        for child in redirect.named_children:
            if child.type == "heredoc_body":
                return text_of(child)
        return ""
    if redirect.type == "herestring_redirect":
        words = [c for c in redirect.named_children if c.type not in ("file_descriptor",)]
        return resolve(words[-1]).code if words else None
    return None


def simple_argv(node: Node) -> tuple[tuple[Word, ...], tuple[Node, ...]] | None:
    redirects: tuple[Node, ...] = ()
    if node.type == "redirected_statement":
        redirects = tuple(node.children_by_field_name("redirect"))
        body = node.child_by_field_name("body")
        if body is None:
            return None
        node = body
    if node.type != "command":
        return None
    name = node.child_by_field_name("name")
    if name is None:
        return None
    redirects += tuple(node.children_by_field_name("redirect"))
    return (resolve(name), *(resolve(a) for a in node.children_by_field_name("argument"))), redirects


def feeder_text(feeder: Feeder) -> str | None:
    """What a stage prints when the text says so: ``echo``/``printf`` words, ``cat`` of a heredoc."""
    found = simple_argv(feeder.node)
    if found is None:
        return None
    argv, redirects = found
    redirects = (*feeder.redirects, *redirects)
    if argv[0].dynamic:
        return None
    name, args = command_name(argv[0]), list(argv[1:])
    if name == "echo":
        escapes = False
        while (
            args
            and len(args[0].value) > 1
            and set(args[0].value[1:]) <= set("neE")
            and args[0].value[0] == "-"
        ):
            escapes = escapes or "e" in args[0].value
            args.pop(0)
        joined = " ".join(word.code for word in args)
        return decode_ansi_c(joined) if escapes else joined
    if name == "printf":
        return printf_text(args)
    if name == "cat" and all(word.value == "-" for word in args):
        for redirect in reversed(redirects):
            if redirect.type in ("heredoc_redirect", "herestring_redirect"):
                return redirect_text(redirect)
    return None


def printf_text(args: list[Word]) -> str | None:
    """What ``printf FORMAT ARGS`` prints, when the words are literal (``%s``/``%b`` filled in
    order; extra words appended), else ``None``."""
    args = list(args)
    if args and args[0].value == "--":
        args.pop(0)
    if not args:
        return None
    out = decode_ansi_c(args[0].code)
    for word in args[1:]:
        for spec in ("%s", "%b"):
            if spec in out:
                out = out.replace(spec, word.code, 1)
                break
        else:
            out += " " + word.code
    return out


def changed_directory(cwd: str, args: tuple[Word, ...]) -> str:
    operands = [w for w in args if not (w.value.startswith("-") and len(w.value) > 1)]
    if not operands:
        return "~"
    target = operands[0]
    if target.dynamic or target.value == "-":
        return ""
    if target.value.startswith(("/", "~")):
        return target.value
    return f"{cwd}/{target.value}" if cwd else ""


def stored_code(name: str, args: tuple[Word, ...]) -> list[Word]:
    """Code ``alias NAME=CODE`` and ``trap CODE SIGNAL`` keep to run later."""
    if name == "alias":
        return [
            Word(value=w.value.split("=", 1)[1], code=w.code.split("=", 1)[1], dynamic=w.dynamic)
            for w in args
            if "=" in w.value and "=" in w.code
        ]
    operands = [w for w in args if w.value not in ("--", "-p", "-l", "-P")]
    if len(operands) >= 2 and operands[0].value != "-":
        return [operands[0]]
    return []


def piped_text(stdin: tuple[Node, ...], feeders: tuple[Feeder, ...]) -> str | None:
    """The literal text a command reads on stdin, when the text shows it (heredoc, echo|)."""
    if stdin:
        return redirect_text(stdin[-1])
    if feeders:
        return feeder_text(feeders[-1])
    return None


def xargs_feed(stdin: tuple[Node, ...], feeders: tuple[Feeder, ...]) -> tuple[Word, ...]:
    """The words ``xargs`` appends, when the stage before it shows them (echo, printf, find)."""
    text = piped_text(stdin, feeders)
    if text is not None:
        return tuple(Word.literal(part) for part in text.split())
    if stdin or not feeders:
        return ()
    found = simple_argv(feeders[-1].node)
    if found is not None and not found[0][0].dynamic and command_name(found[0][0]) == "find":
        return find_parts(found[0][1:])[0]
    return ()


def find_exec_commands(argv: tuple[Word, ...]) -> Iterator[tuple[Word, ...]]:
    """What ``find … -exec CMD {} ;`` runs, once per starting point (find reports those first)."""
    roots, expression = find_parts(argv[1:])
    index = 0
    while index < len(expression):
        if expression[index].value not in ("-exec", "-execdir", "-ok", "-okdir"):
            index += 1
            continue
        end = index + 1
        while end < len(expression) and expression[end].value not in (";", "+"):
            end += 1
        segment = expression[index + 1 : end]
        index = end + 1
        if not segment:
            continue
        for root in roots[:4]:
            yield tuple(_substitute(word, "{}", root) for word in segment)


def _substitute(word: Word, marker: str, root: Word) -> Word:
    if marker not in word.value:
        return word
    return Word(
        value=word.value.replace(marker, root.value),
        code=word.code.replace(marker, root.code),
        dynamic=word.dynamic or root.dynamic,
        node=word.node,
    )
