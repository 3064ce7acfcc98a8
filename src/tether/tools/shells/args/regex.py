"""JavaScript-dialect regular expressions (spec 003: ``wait.pattern``, ``read.search``) run on ``re``.

Invariant: a pattern is either translated to a Python pattern that matches what the same pattern
matches in JavaScript (no flags: case-sensitive, not multiline, not dotAll, not unicode mode), or
refused with a message saying what is wrong. Differences handled:

- named groups ``(?<n>…)`` → ``(?P<n>…)``; backreference ``\\k<n>`` → ``(?P=n)``;
- ``\\d \\w \\W`` are ASCII-only in JS (Python's are Unicode) → explicit ASCII classes;
- ``.`` excludes ``\\n \\r \\u2028 \\u2029`` in JS (Python's excludes only ``\\n``);
- ``[^]`` (any character) and ``[]`` (never matches) have no Python spelling;
- ``\\cX`` control escapes; ``\\u{…}`` is not JS without the u flag and is refused;
- JS "identity escapes" of letters (``\\a`` = ``a``, ``\\Z`` = ``Z``) mean the letter itself, while
  Python gives several of them other meanings (bell, end of string);
- syntax JS does not have is refused: inline flags ``(?i)``, ``(?P…)``, comments ``(?#…)``,
  atomic groups ``(?>…)``, possessive quantifiers ``a*+``;
- ``$`` → ``\\Z``: Python's ``$`` also matches just before a final newline, JavaScript's does not.

The compiled pattern carries no flags, like a JS literal without flags: ``^``/``$`` anchor the
whole subject, so a caller that wants them per line matches line by line. Variable-width
lookbehind, legal in JS, is refused by ``re`` and reported as such. Left as Python has them:
``\\b`` next to non-ASCII letters and ``\\s`` on U+FEFF and U+001C–U+001F (rare in terminal text).
"""

from __future__ import annotations

import re

from tether.errors import UsageError

_ASCII_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_"}
_OUTSIDE_ESCAPES = {"d": "[0-9]", "D": "[^0-9]", "w": "[A-Za-z0-9_]", "W": "[^A-Za-z0-9_]"}
# Escapes whose meaning is the same in JS and Python (outside a character class).
_SHARED_ESCAPES = set("sSbBnrtfv0")
_DOT = "[^\\n\\r\\u2028\\u2029]"
_BRACE_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")


def js_regex_to_python(pattern: str) -> str:
    """Translate a JS-dialect ``pattern`` to Python ``re`` syntax; ``ValueError`` if it is not JS."""
    out: list[str] = []
    i = 0
    in_class = False
    class_start = False
    after_quantifier = False  # the previous token was a quantifier (so "+" here would be possessive)
    while i < len(pattern):
        ch = pattern[i]
        quantifier = False
        if ch == "\\":
            if i + 1 >= len(pattern):
                raise ValueError("pattern ends with a lone backslash")
            piece, i = _escape(pattern, i, in_class)
            out.append(piece)
            class_start = False
        elif in_class:
            if ch == "]" and class_start:
                # "[]" matches nothing and "[^]" anything in JS; Python reads "]" here as a literal.
                out[-1] = "[\\s\\S]" if out[-1] == "[^" else "(?!)"
                in_class = False
            else:
                if ch == "]":
                    in_class = False
                out.append("\\[" if ch == "[" else ch)  # JS "[" in a class is a literal
            class_start = False
            i += 1
        elif ch == "[":
            in_class = class_start = True
            negated = pattern.startswith("[^", i)
            out.append("[^" if negated else "[")
            i += 2 if negated else 1
        elif ch == "(" and pattern.startswith("(?", i):
            piece, i = _group_open(pattern, i)
            out.append(piece)
        elif ch == ".":
            out.append(_DOT)
            i += 1
        elif ch == "$":
            out.append("\\Z")  # Python's "$" also matches before a final newline; JS's does not
            i += 1
        elif ch == "{":
            m = _BRACE_QUANTIFIER.match(pattern, i)
            if m is None:
                out.append("\\{")  # JS reads a "{" that starts no quantifier literally; Python may not
                i += 1
            else:
                out.append(m.group(0))
                i = m.end()
                quantifier = True
        elif ch in "*+?":
            if ch == "+" and after_quantifier:
                raise ValueError(f"possessive quantifier at position {i} is not JavaScript syntax")
            # A "?" right after a quantifier makes it lazy; it is not itself a quantifier.
            quantifier = not (ch == "?" and after_quantifier)
            out.append(ch)
            i += 1
        else:
            out.append(ch)
            i += 1
        after_quantifier = quantifier
    if in_class:
        raise ValueError("unterminated character class '['")
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    nxt = pattern[i + 1]
    if nxt == "k" and not in_class:
        m = re.match(r"\\k<([A-Za-z_$][A-Za-z0-9_$]*)>", pattern[i:])
        if m is None:
            raise ValueError(f"bad named backreference at position {i}; write \\k<name>")
        return f"(?P={_group_name(m.group(1))})", i + m.end()
    if nxt == "c":
        if i + 2 < len(pattern) and pattern[i + 2].isascii() and pattern[i + 2].isalpha():
            return f"\\x{ord(pattern[i + 2]) % 32:02x}", i + 3
        return "\\\\c", i + 2  # JS reads a bad \c as the two characters "\c".
    if nxt == "x":
        if re.match(r"[0-9A-Fa-f]{2}", pattern[i + 2 : i + 4]):
            return pattern[i : i + 4], i + 4
        return "x", i + 2
    if nxt == "u":
        if pattern.startswith("{", i + 2):
            raise ValueError(f"\\u{{…}} at position {i} needs the u flag, which patterns do not take")
        if re.match(r"[0-9A-Fa-f]{4}", pattern[i + 2 : i + 6]):
            return pattern[i : i + 6], i + 6
        return "u", i + 2
    if nxt.isdigit():
        m = re.match(r"\\(\d+)", pattern[i:])
        assert m is not None
        return m.group(0), i + m.end()
    if in_class and nxt in _ASCII_CLASS_ESCAPES:
        return _ASCII_CLASS_ESCAPES[nxt], i + 2
    if not in_class and nxt in _OUTSIDE_ESCAPES:
        return _OUTSIDE_ESCAPES[nxt], i + 2
    if in_class and nxt == "b":
        return "\\x08", i + 2  # backspace inside a class, in both dialects
    if nxt in _SHARED_ESCAPES or nxt in "DW":
        return "\\" + nxt, i + 2
    if nxt.isascii() and nxt.isalpha():
        return nxt, i + 2  # JS identity escape: "\a" is "a"
    return re.escape(nxt), i + 2


def _group_open(pattern: str, i: int) -> tuple[str, int]:
    rest = pattern[i + 2 : i + 4]
    if rest.startswith((":", "=", "!")) or rest in ("<=", "<!"):
        return pattern[i : i + 2], i + 2
    m = re.match(r"\(\?<([A-Za-z_$][A-Za-z0-9_$]*)>", pattern[i:])
    if m is not None:
        return f"(?P<{_group_name(m.group(1))}>", i + m.end()
    raise ValueError(
        f"'(?{pattern[i + 2 : i + 3]}' at position {i} is not JavaScript syntax; "
        "groups are (…), (?:…), (?=…), (?!…), (?<=…), (?<!…), (?<name>…)"
    )


def _group_name(name: str) -> str:
    if "$" in name:
        raise ValueError(f"group name {name!r}: '$' is not supported in group names")
    return name


def compile_js_regex(pattern: str, *, field: str) -> re.Pattern[str]:
    """Translate and compile ``pattern``; a ``UsageError`` naming ``field`` if it is not valid."""
    try:
        return re.compile(js_regex_to_python(pattern))
    except (ValueError, re.error, OverflowError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, re.error) else str(exc)
        raise UsageError(
            f"{field}: invalid regular expression {pattern!r} ({detail}); give a JavaScript regex "
            "such as 'error|failed' or 'ready \\d+' (case-sensitive, no /slashes/ or flags)"
        ) from None
