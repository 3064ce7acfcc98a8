"""What a walk knows from earlier commands: variables, the directory, functions, aliases.

Invariant: a ``WalkState`` starts from the shell's own report (``ShellState``: complete, so an
unlisted variable is unset) or from nothing (every unlisted variable unknown), and only the walk
that owns it changes it; ``child`` is a separate process's copy (``bash -c``), whose changes never
come back. Alias expansion is textual and once per alias, as bash does it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tree_sitter import Node

from tether.shells.guard.scope import Scope
from tether.shells.guard.shellstate import ShellState
from tether.shells.guard.words import text_of

_ALIASABLE = re.compile(r"[^\s'\"\\$`;&|<>()]+")


class WalkState:
    """What earlier commands told: variables, the ``cd`` directory, functions, aliases."""

    __slots__ = ("aliases", "calling", "expanding", "functions", "loop_factor", "namerefs", "scope")

    def __init__(self, scope: Scope | None = None) -> None:
        self.scope = scope if scope is not None else Scope()
        self.functions: dict[str, str | None] = {}
        self.aliases: dict[str, str] = {}
        self.namerefs: dict[str, str] = {}
        self.calling: set[str] = set()  # functions being followed (no recursion)
        self.expanding: set[str] = set()  # aliases being expanded (bash expands each once)
        self.loop_factor = 1  # how many times the current body is being walked, over all loops

    @classmethod
    def of(cls, shell: ShellState | None, known: Mapping[str, str] | None = None) -> WalkState:
        """A walk that starts from the shell's reported state (or from nothing but ``known``)."""
        if shell is None:
            return cls(Scope(known))
        unknown = {name for name in shell.variables if name.startswith("__TETHER_V_")}
        variables = {**(known or {}), **shell.variables}
        cwd = shell.cwd
        home = variables.get("HOME", "")
        if home.startswith("/") and home.rstrip("/"):
            # The shell's home is a home directory whatever its path (/srv/ci, /tmp/x): it reads
            # as ~, as the guard reads $HOME when it has no state, and so does a directory in it.
            variables["HOME"] = "~"
            home = home.rstrip("/")
            if cwd == home or cwd.startswith(home + "/"):
                cwd = "~" + cwd[len(home) :]
        scope = Scope(
            variables,
            arrays=shell.arrays,
            complete=True,
            unknown=unknown,
            # Every agent line is put on readline's line by a bind -x function of tether's, and
            # bash sets $_ to the last word of what ran last: that function's name.
            last_arg="__tether_load",
            cwd=cwd,
        )
        state = cls(scope)
        state.functions.update(shell.functions)
        state.aliases.update(shell.aliases)
        state.namerefs.update(shell.namerefs)
        return state

    @property
    def cwd(self) -> str:
        return self.scope.cwd

    @cwd.setter
    def cwd(self, value: str) -> None:
        self.scope.cwd = value

    def fingerprint(self) -> int:
        """Changes whenever the walk changes anything a later command could read."""
        scope = self.scope
        return hash(
            (
                frozenset(scope.vars.items()),
                frozenset(scope.arrays.items()),
                frozenset(scope.unknown),
                scope.cwd,
                frozenset(self.functions.items()),
                frozenset(self.aliases.items()),
                frozenset(self.namerefs.items()),
            )
        )

    def child(self) -> WalkState:
        """A separate process's view (``bash -c``): it starts from a copy and changes nothing here."""
        state = WalkState(self.scope.copy())
        state.functions.update(self.functions)
        state.calling = set(self.calling)
        state.loop_factor = self.loop_factor
        return state


def alias_expansion(node: Node, name: Node, state: WalkState) -> tuple[str, str] | None:
    """``(alias, text)`` when the command's first word is an alias bash would expand."""
    word = text_of(name)
    if not state.aliases or not _ALIASABLE.fullmatch(word) or word in state.expanding:
        return None
    value = state.aliases.get(word)
    if value is None:
        return None
    rest = text_of(node)[name.end_byte - node.start_byte :]
    if value.endswith((" ", "\t")):
        # A blank at the end of an alias makes bash check the next word too (alias sudo='sudo ').
        match = re.match(r"(\s*)([^\s'\"\\$`;&|<>()]+)", rest)
        if match is not None and match[2] in state.aliases and match[2] != word:
            rest = match[1] + state.aliases[match[2]] + rest[match.end() :]
    return word, value + rest
