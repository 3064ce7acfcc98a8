"""What the guard's walker reports: the events every rule judges.

Invariant: events are plain frozen values; an ``Invocation`` is one simple command after quote
removal (or what a wrapper around it runs), with enough context to judge it alone: the stages
that feed its stdin, its stdin redirects, and the directory a literal ``cd`` moved to.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from tether.shells.guard.words import Word

WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Feeder:
    """An earlier pipeline stage: its output is this command's input."""

    node: Node
    redirects: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Invocation:
    """One simple command (or what a wrapper runs), with its words resolved."""

    name: str  # argv[0] with its directory stripped
    argv: tuple[Word, ...]
    text: str  # the source of the simple command, for the verdict
    feeders: tuple[Feeder, ...] = ()
    stdin: tuple[Node, ...] = ()  # `< file`, heredoc and here-string redirects
    cwd: str = ""  # the directory an earlier literal `cd` moved to ("" = unknown)
    assigns: tuple[Word, ...] = ()  # values of `X=… cmd` prefix assignments (the command's environment)

    @property
    def args(self) -> tuple[Word, ...]:
        return self.argv[1:]


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirect:
    op: str
    target: Word
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionDef:
    name: str
    body: Node
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DynamicName:
    word: Word
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    why: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Hidden:
    """Something the text does that only run time (or the shell's unread state) decides: a value
    split on an unknown IFS, code stored from an unknown value, a function whose body was not
    reported (``needs`` names it), history expansion."""

    why: str
    text: str
    needs: tuple[str, ...] = ()


Event = Invocation | Redirect | FunctionDef | DynamicName | Problem | Hidden
