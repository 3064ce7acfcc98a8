"""Heredocs as bash reads them, and what is still open where a text stops.

Invariant: ``lex`` finds every here-document the way bash does — the operator (``<<``, ``<<-``)
outside quotes, comments and arithmetic, its delimiter after quote removal, and a body that ends
at the first line *equal* to the delimiter (leading tabs removed for ``<<-``) — and hands the
parser a text on which tree-sitter-bash agrees. tree-sitter-bash ends a body at any line that
merely *starts* with the delimiter, even after blanks (``EOF-not``, ``  EOF``), and cannot read a
delimiter quoted in parts (``<<"E"OF``); such delimiters are renamed to a word no body line
starts with, so the body tree-sitter sees is exactly bash's. The body itself is never changed: a
quoted body stays literal, an unquoted one keeps its expansions for the walker (an indented
command substitution gets an always-empty expansion before it, which tree-sitter needs to see it).

``Lexed.closers`` lists what the text leaves open at its end (innermost last): a quote, ``$(``,
a backtick, ``${``, a trailing ``\\``, or a here-document whose delimiter line has not come. A
text that ends inside one of them is *incomplete*, not wrong: bash would wait for more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_META = frozenset(" \t\n;&|<>()")
_SIMPLE_DELIMITER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Heredoc:
    delimiter: str  # after quote removal
    quoted: bool  # a quoted delimiter: the body is literal
    strip_tabs: bool  # <<-
    word: tuple[int, int]  # span of the delimiter word in the text
    body: tuple[int, int]  # span of the body (up to the terminator line)
    end: tuple[int, int] | None  # span of the terminator line's delimiter; None: not there yet


@dataclass(frozen=True, slots=True, kw_only=True)
class Lexed:
    text: str  # what the parser should read (delimiters renamed where tree-sitter would err)
    heredocs: tuple[Heredoc, ...]
    closers: tuple[str, ...]  # what closes each quote or substitution open at the end, in order
    terminators: tuple[str, ...]  # the delimiter lines still missing (as ``text`` names them)

    @property
    def open(self) -> bool:
        return bool(self.closers or self.terminators)


def prepared(text: str) -> str:
    """The text the parser should read: ``text`` itself unless it holds a heredoc to rename."""
    return lex(text).text if "<<" in text else text


def lex(text: str) -> Lexed:
    lexer = _Lexer(text)
    lexer.run()
    heredocs = tuple(lexer.heredocs)
    rewritten, names = _rename(text, heredocs)
    terminators: list[str] = []
    for doc, name in zip(heredocs, names, strict=True):
        if doc.end is None:
            # The first missing line may start right here, when the text ends with a newline of
            # a line whose heredocs have begun.
            fresh = not terminators and text.endswith("\n") and "\n" in text[doc.word[1] :]
            terminators.append(("" if fresh else "\n") + name)
    return Lexed(
        text=rewritten, heredocs=heredocs, closers=tuple(lexer.closers()), terminators=tuple(terminators)
    )


class _Lexer:
    """A small bash lexer: just enough to find here-documents and what is left open."""

    __slots__ = ("heredocs", "i", "pending", "stack", "text", "trailing_escape")

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        # Contexts: "'", '"', "$'", "`", "$(", "((", "${", "(".  "top" is the bottom of the stack.
        self.stack: list[str] = []
        self.pending: list[tuple[str, bool, bool, tuple[int, int]]] = []
        self.heredocs: list[Heredoc] = []
        self.trailing_escape = False

    def closers(self) -> list[str]:
        close = {"'": "'", '"': '"', "$'": "'", "`": "`", "$(": ")", "((": "))", "${": "}", "(": ")"}
        out = [close[ctx] for ctx in reversed(self.stack)]
        if self.trailing_escape:
            out.append("\n:")
        return out

    def run(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            ctx = self.stack[-1] if self.stack else "top"
            c = text[self.i]
            if ctx == "'":
                self._until("'")
            elif ctx == "$'":
                self._ansi()
            elif ctx == '"':
                self._double(c)
            elif ctx == "((":
                self._arith(c)
            else:
                self._code(c, ctx)
        self._finish()

    def _finish(self) -> None:
        n = len(self.text)
        for delimiter, quoted, strip, word in self.pending:  # operators whose line has not ended
            self.heredocs.append(
                Heredoc(
                    delimiter=delimiter, quoted=quoted, strip_tabs=strip, word=word, body=(n, n), end=None
                )
            )
        self.pending = []

    def _until(self, quote: str) -> None:
        end = self.text.find(quote, self.i)
        if end < 0:
            self.i = len(self.text)
            return
        self.i = end + 1
        self.stack.pop()

    def _ansi(self) -> None:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c == "\\":
                self.i += 2
                continue
            self.i += 1
            if c == "'":
                self.stack.pop()
                return

    def _double(self, c: str) -> None:
        if c == "\\":
            self.i += 2
            if self.i > len(self.text):
                self.trailing_escape = False  # inside quotes: the quote is what stays open
            return
        if c == '"':
            self.stack.pop()
            self.i += 1
            return
        if self._substitution_start():
            return
        self.i += 1

    def _arith(self, c: str) -> None:
        text = self.text
        if text.startswith("))", self.i):
            self.stack.pop()
            self.i += 2
        elif c == "(":
            self.stack.append("(")
            self.i += 1
        elif not self._substitution_start():
            self.i += 1

    def _substitution_start(self) -> bool:
        text = self.text
        if text.startswith("$((", self.i):
            self.stack.append("((")
            self.i += 3
        elif text.startswith("$(", self.i):
            self.stack.append("$(")
            self.i += 2
        elif text.startswith("${", self.i):
            self.stack.append("${")
            self.i += 2
        elif text[self.i] == "`":
            self.stack.append("`")
            self.i += 1
        else:
            return False
        return True

    def _code(self, c: str, ctx: str) -> None:
        text = self.text
        if c == "\\":
            if self.i + 1 >= len(text):
                self.trailing_escape = True
            self.i += 2
            return
        if c == "'":
            self.stack.append("'")
            self.i += 1
        elif c == '"':
            self.stack.append('"')
            self.i += 1
        elif text.startswith("$'", self.i):
            self.stack.append("$'")
            self.i += 2
        elif (ctx == "`" and c == "`") or (ctx == "${" and c == "}") or (c == ")" and ctx in ("$(", "(")):
            self.stack.pop()
            self.i += 1
        elif c == "(" and ctx != "${":
            if text.startswith("((", self.i) and self._at_word_start():
                self.stack.append("((")
                self.i += 2
            else:
                self.stack.append("(")
                self.i += 1
        elif self._substitution_start():
            return
        elif c == "#" and ctx != "${" and self._at_word_start():
            end = text.find("\n", self.i)
            self.i = len(text) if end < 0 else end
        elif c == "<" and text.startswith("<<<", self.i):
            self.i += 3  # a here-string
        elif c == "<" and ctx != "${" and text.startswith("<<", self.i):
            self._heredoc_operator()
        elif c == "\n":
            self.i += 1
            if self.pending:
                self._bodies()
        else:
            self.i += 1

    def _at_word_start(self) -> bool:
        return self.i == 0 or self.text[self.i - 1] in " \t\n;&|()"

    def _heredoc_operator(self) -> None:
        text = self.text
        self.i += 2
        strip = self.i < len(text) and text[self.i] == "-"
        if strip:
            self.i += 1
        while self.i < len(text) and text[self.i] in " \t":
            self.i += 1
        start = self.i
        value: list[str] = []
        quoted = False
        while self.i < len(text) and text[self.i] not in _META:
            c = text[self.i]
            if c in "'\"":
                quoted = True
                end = text.find(c, self.i + 1)
                end = len(text) if end < 0 else end
                value.append(text[self.i + 1 : end])
                self.i = end + 1
            elif c == "\\":
                quoted = True
                value.append(text[self.i + 1 : self.i + 2])
                self.i += 2
            elif c == "$" and text.startswith(("$'", '$"'), self.i):
                quoted = True
                self.i += 1
            else:
                value.append(c)
                self.i += 1
        if self.i > start:
            self.pending.append(("".join(value), quoted, strip, (start, min(self.i, len(text)))))

    def _bodies(self) -> None:
        """Read the bodies of every heredoc pending on the line that just ended."""
        text = self.text
        pending, self.pending = self.pending, []
        for index, (delimiter, quoted, strip, word) in enumerate(pending):
            body_start = self.i
            end: tuple[int, int] | None = None
            while self.i < len(text):
                line_end = text.find("\n", self.i)
                line_end = len(text) if line_end < 0 else line_end
                line = text[self.i : line_end]
                shown = line.lstrip("\t") if strip else line
                if shown == delimiter:
                    end = (line_end - len(delimiter), line_end)
                    body = (body_start, self.i)
                    self.i = min(line_end + 1, len(text))
                    break
                self.i = line_end + 1
            else:
                body = (body_start, len(text))
            self.i = min(self.i, len(text))
            doc = Heredoc(delimiter=delimiter, quoted=quoted, strip_tabs=strip, word=word, body=body, end=end)
            self.heredocs.append(doc)
            if end is None:
                n = len(text)
                for delimiter2, quoted2, strip2, word2 in pending[index + 1 :]:
                    self.heredocs.append(
                        Heredoc(
                            delimiter=delimiter2,
                            quoted=quoted2,
                            strip_tabs=strip2,
                            word=word2,
                            body=(n, n),
                            end=None,
                        )
                    )
                return


# tree-sitter-bash reads a body line that starts with blanks and then a command substitution
# (``  $(cmd)``, a tab-indented `` `cmd` `` under ``<<-``) as plain text: the command was never
# judged. An expansion that is always empty put before the blanks makes it read the line as bash
# does, and changes nothing of what the body expands to.
_INDENTED = re.compile(r"(?m)^(?=[ \t]+(?:\$\(|`))")
_NOTHING = "${__tether_blank:+}"


def _rename(text: str, heredocs: tuple[Heredoc, ...]) -> tuple[str, list[str]]:
    """The text with each delimiter tree-sitter would misread renamed, and an empty expansion before
    each indented command substitution of an unquoted body; the name each heredoc has."""
    edits: list[tuple[int, int, str]] = []
    names: list[str] = []
    for doc in heredocs:
        body = text[doc.body[0] : doc.body[1]]
        if not doc.quoted:
            edits.extend(
                (doc.body[0] + m.start(), doc.body[0] + m.start(), _NOTHING) for m in _INDENTED.finditer(body)
            )
        lines = [line.lstrip(" \t") for line in body.split("\n")]
        simple = bool(doc.delimiter) and set(doc.delimiter) <= _SIMPLE_DELIMITER
        plain = text[doc.word[0] : doc.word[1]] in (doc.delimiter, f"'{doc.delimiter}'", f'"{doc.delimiter}"')
        if simple and plain and not any(line.startswith(doc.delimiter) for line in lines):
            names.append(doc.delimiter)
            continue
        new = _fresh(doc.delimiter, lines)
        names.append(new)
        edits.append((doc.word[0], doc.word[1], f"'{new}'" if doc.quoted else new))
        if doc.end is not None:
            edits.append((doc.end[0], doc.end[1], new))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text, names


def _fresh(delimiter: str, lines: list[str]) -> str:
    base = "".join(c for c in delimiter if c in _SIMPLE_DELIMITER)[:24] or "EOF"
    k = 0
    while True:
        candidate = f"{base}_tether{k}"
        if not any(line.startswith(candidate) for line in lines):
            return candidate
        k += 1
