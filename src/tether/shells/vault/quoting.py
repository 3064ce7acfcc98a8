"""The bash quoting context of given spans of a command line (for vault reference substitution).

Invariant: the answer for a span is the context bash itself would be in when it reads the span's
first character — unquoted, inside ``"…"``, ``'…'``, ``$'…'``, or the body of a here-document
(quoted delimiter or not) — for the constructs a command line is made of: backslash escapes,
nested ``$(…)``, ``(…)``, backticks, ``${…}``, comments, and ``<<``/``<<-`` here-documents.

The spans themselves are skipped whole, so the braces and dots of ``{{vault.NAME}}`` never change
the context. This is a scanner for quoting, not a parser: it judges nothing else about the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Context = Literal["plain", "double", "single", "ansi", "heredoc", "heredoc-quoted"]

_FRAME_CONTEXT: dict[str, Context] = {
    "top": "plain",
    "cmdsub": "plain",
    "paren": "plain",
    "bt": "plain",
    "param": "plain",
    "dq": "double",
    "sq": "single",
    "ansi": "ansi",
}
_WORD_END = frozenset(" \t\n;&|<>()")
_COMMENT_AFTER = frozenset(" \t\n;&|()")


@dataclass(frozen=True, slots=True, kw_only=True)
class _HereDoc:
    delimiter: str
    quoted: bool
    strip_tabs: bool


class _Scanner:
    def __init__(self, text: str, spans: list[tuple[int, int]]) -> None:
        self.text = text
        self.ends = dict(spans)
        self.found: dict[int, Context] = {}
        self.stack = ["top"]
        self.heredocs: list[_HereDoc] = []

    def run(self) -> None:
        i, n = 0, len(self.text)
        while i < n:
            if i in self.ends:
                self.found[i] = _FRAME_CONTEXT[self.stack[-1]]
                i = self.ends[i]
                continue
            frame = self.stack[-1]
            if frame == "sq":
                i = self._single(i)
            elif frame == "ansi":
                i = self._ansi(i)
            elif frame == "dq":
                i = self._double(i)
            else:
                i = self._unquoted(i)

    def _single(self, i: int) -> int:
        if self.text[i] == "'":
            self.stack.pop()
        return i + 1

    def _ansi(self, i: int) -> int:
        if self.text[i] == "\\":
            return self._escaped(i)
        if self.text[i] == "'":
            self.stack.pop()
        return i + 1

    def _escaped(self, i: int) -> int:
        # A backslash right before a reference escapes nothing of the value: the span is judged whole.
        return i + 1 if i + 1 in self.ends else i + 2

    def _expansion_start(self, i: int) -> int | None:
        text = self.text
        if text.startswith("$(", i):
            self.stack.append("cmdsub")
            return i + 2
        if text.startswith("${", i):
            self.stack.append("param")
            return i + 2
        if text[i] == "`":
            if self.stack[-1] == "bt":
                self.stack.pop()
            else:
                self.stack.append("bt")
            return i + 1
        return None

    def _double(self, i: int) -> int:
        c = self.text[i]
        if c == "\\":
            return self._escaped(i)
        if c == '"':
            self.stack.pop()
            return i + 1
        after = self._expansion_start(i)
        return i + 1 if after is None else after

    def _unquoted(self, i: int) -> int:
        text, frame, c = self.text, self.stack[-1], self.text[i]
        if c == "\\":
            return self._escaped(i)
        if text.startswith("$'", i):
            self.stack.append("ansi")
            return i + 2
        after = self._expansion_start(i)
        if after is not None:
            return after
        if c == "'":
            self.stack.append("sq")
        elif c == '"':
            self.stack.append("dq")
        elif c == "(":
            self.stack.append("paren")
        elif (c == ")" and frame in ("cmdsub", "paren")) or (c == "}" and frame == "param"):
            self.stack.pop()
        elif c == "#" and frame != "param" and (i == 0 or text[i - 1] in _COMMENT_AFTER):
            newline = text.find("\n", i)
            return len(text) if newline < 0 else newline
        elif text.startswith("<<<", i):
            return i + 3  # a here-string: its word is ordinary text
        elif text.startswith("<<", i) and frame != "param":
            return self._heredoc_operator(i + 2)
        elif c == "\n" and self.heredocs:
            return self._heredoc_bodies(i + 1)
        return i + 1

    def _heredoc_operator(self, j: int) -> int:
        text, n = self.text, len(self.text)
        strip_tabs = j < n and text[j] == "-"
        j += strip_tabs
        while j < n and text[j] in " \t":
            j += 1
        word: list[str] = []
        quoted = False
        while j < n and text[j] not in _WORD_END:
            c = text[j]
            if c in "'\"":
                close = text.find(c, j + 1)
                close = n if close < 0 else close
                word.append(text[j + 1 : close])
                quoted, j = True, close + 1
            elif c == "\\":
                word.append(text[j + 1 : j + 2])
                quoted, j = True, j + 2
            else:
                word.append(c)
                j += 1
        if word:
            self.heredocs.append(_HereDoc(delimiter="".join(word), quoted=quoted, strip_tabs=strip_tabs))
        return j

    def _heredoc_bodies(self, pos: int) -> int:
        text, n = self.text, len(self.text)
        for doc in self.heredocs:
            context: Context = "heredoc-quoted" if doc.quoted else "heredoc"
            while pos < n:
                newline = text.find("\n", pos)
                line_end = n if newline < 0 else newline
                line = text[pos:line_end]
                if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                    pos = line_end + 1
                    break
                for start in self.ends:
                    if pos <= start < line_end:
                        self.found[start] = context
                pos = line_end + 1
        self.heredocs.clear()
        return pos


def reference_contexts(text: str, spans: list[tuple[int, int]]) -> list[Context]:
    """The quoting context at the start of each ``(start, end)`` span, in the order given."""
    scanner = _Scanner(text, spans)
    scanner.run()
    return [scanner.found.get(start, "plain") for start, _ in spans]
