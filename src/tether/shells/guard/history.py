"""History expansion: where an interactive bash would replace part of a line with text from its
history before running it (``!!``, ``!$``, ``!-2``, ``!rm``, ``!?x?``, ``^old^new``).

Invariant: ``designator`` finds every place bash's history expansion would act on a line, erring
towards finding one: only single quotes and a backslash stop it (double quotes do not, except a
``!`` right before the closing quote), and a ``!`` followed by a blank, ``=``, ``(``, the end of the
line or a closing double quote is left alone, as bash leaves it; so are ``$!``, ``${!name}`` and
``[!…]``. The guard cannot see the history, so such a line is refused rather than guessed at.
"""

from __future__ import annotations

_NO_EXPAND = frozenset(" \t\n\r=(")


def designator(line: str, histchars: str = "!^#") -> str | None:
    """The first history expansion in ``line`` (its text), or ``None``."""
    bang = histchars[:1] or "!"
    quick = histchars[1:2] or "^"
    stripped = line.lstrip(" \t")
    if stripped.startswith(quick) and quick in stripped[1:]:
        return stripped.split()[0] if stripped.split() else stripped
    in_double = False
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char == "'" and not in_double:
            end = line.find("'", index + 1)
            if end < 0:
                return None
            index = end + 1
            continue
        if char == '"':
            in_double = not in_double
        elif char == bang and _expands(line, index, in_double):
            end = index + 1
            while end < len(line) and line[end] not in " \t\n;&|<>()\"'":
                end += 1
            return line[index : max(end, index + 2)]
        index += 1
    return None


def _expands(line: str, index: int, in_double: bool) -> bool:
    after = line[index + 1 : index + 2]
    if not after or after in _NO_EXPAND:
        return False
    if in_double and after == '"':
        return False
    before = line[index - 1 : index]
    return not (before == "$" or line[max(0, index - 2) : index] == "${" or before == "[")
