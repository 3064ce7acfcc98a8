"""Incomplete versus unparseable: does the text only stop early, or is it wrong?

Invariant: ``completion`` returns a suffix only when appending it makes tree-sitter parse the text
without any error — a proof that the text is a *prefix* of valid bash (an unclosed quote, heredoc,
``$(``, ``if``/``for``/``while``/``case``/``{``/``(``, or a line that ends in ``|``, ``&&``, ``\\``):
bash would wait for more instead of running it. ``None`` means no such suffix was found and the
text is judged unparseable, as before. The search is bounded (a few parses).
"""

from __future__ import annotations

from tree_sitter import Node, Tree

from tether.shells.guard.heredocs import Lexed
from tether.shells.guard.words import parse_bytes

_ROUNDS = 6
# What closes a construct whose opening keyword tree-sitter saw without its end.
_TAIL_OPERATORS = ("&&", "||", "|&", "|")
_MISSING = {"fi": "\nfi", "done": "\ndone", "esac": "\nesac", "}": "\n}", ")": ")", "`": "`", "]]": " ]]"}


def completion(text: str, lexed: Lexed, tree: Tree) -> str | None:
    """A suffix that completes ``text`` (as ``lexed`` rewrote it), or ``None``."""
    closers, terminators = "".join(lexed.closers), "".join(lexed.terminators)
    tried: set[str] = set()
    for base in (closers + terminators, terminators + closers, ""):
        if base in tried:
            continue
        tried.add(base)
        suffix = base
        current = tree if not base else None
        for _ in range(_ROUNDS):
            if current is None:
                current = parse_bytes((lexed.text + suffix).encode("utf-8", "replace"))
            if not current.root_node.has_error:
                return suffix if suffix else None
            more = _repair(lexed.text + suffix, current)
            if more is None:
                break
            suffix += more
            current = None
    return None


def _repair(text: str, tree: Tree) -> str | None:
    stripped = text.rstrip(" \t")
    if stripped.endswith(_TAIL_OPERATORS):
        return " :"
    end = len(text.encode("utf-8", "replace"))
    missing = _last_missing(tree.root_node, end)
    if missing is not None:
        return _MISSING.get(missing.type, " :" if missing.type == "word" else None)
    error = _trailing_error(tree.root_node, end)
    if error is None:
        return None
    return _close_keywords(error)


def _last_missing(root: Node, end: int) -> Node | None:
    found: Node | None = None
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing and node.start_byte >= end - 1:
            found = node
        stack.extend(node.children)
    return found


def _trailing_error(root: Node, end: int) -> Node | None:
    """The outermost ERROR node that reaches the end of the text (an error in the middle is wrong)."""
    errors = [n for n in _walk(root) if n.is_error]
    if not errors:
        return None
    if any(n.end_byte < end - 1 and not _only_trailing(n, end) for n in errors):
        return None
    return min(errors, key=lambda n: n.start_byte)


def _only_trailing(node: Node, end: int) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.is_error and parent.end_byte >= end - 1:
            return True
        parent = parent.parent
    return False


def _walk(root: Node) -> list[Node]:
    out: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def _close_keywords(error: Node) -> str | None:
    """Close the innermost construct whose opening keyword the error holds."""
    stack: list[list[str]] = []
    for leaf in _leaves(error):
        kind = leaf.type
        if kind in ("if", "while", "until", "for", "select", "case", "{", "("):
            stack.append([kind])
        elif kind in ("then", "do", "in") and stack:
            stack[-1].append(kind)
        elif kind in ("fi", "done", "esac", "}", ")") and stack:
            if kind == ")" and stack[-1][0] == "case":
                stack[-1].append("item")
                continue
            stack.pop()
        elif kind == ";;" and stack and stack[-1][0] == "case" and "item" in stack[-1]:
            stack[-1].remove("item")
    if not stack:
        return None
    top = stack[-1]
    head = top[0]
    if head == "if":
        return "\nfi" if "then" in top else "\nthen :\nfi"
    if head in ("while", "until", "for", "select"):
        return "\ndone" if "do" in top else "\ndo :\ndone"
    if head == "case":
        if "item" in top:
            return "\n;;\nesac"
        return "\nesac" if "in" in top else " in\nesac"
    if head == "{":
        return "\n:\n}"
    return "\n)"


def _leaves(node: Node) -> list[Node]:
    out: list[Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.child_count == 0:
            out.append(current)
        else:
            stack.extend(reversed(current.children))
    return out
