"""Macro invocation: ``/NAME`` or ``/NAME args`` in a ``shell_run`` command or ``shell_send`` text.

Invariant: a command expands only when it is *exactly* an invocation — it starts with ``/``, then a
name of ``[A-Za-z0-9_.-]`` (1–64 characters) that is a macro visible to the caller, then either
nothing or blanks (spaces/tabs) and the arguments — and it expands exactly once (a macro's text is
never expanded again). Anything else is returned unchanged, so ``/usr/bin/env``, ``./build``,
``/tmp`` (with no macro ``tmp``) and ``ls /x`` are ordinary commands.

How arguments are used:

- If the macro's text holds placeholders, they are filled in: ``{{1}}`` … ``{{9}}`` become the
  arguments split like a POSIX shell would split them, each re-quoted as one shell word
  (``shlex.quote``; a missing one becomes nothing), and ``{{@}}`` becomes the argument string
  exactly as written. Placeholders use braces, not ``$1``, so ``awk '{print $1}'`` in a macro
  means what it says.
- Otherwise the arguments, as written, follow the text (trailing whitespace of the text removed)
  after one space.

An expanded command cannot be wrapped with the exit-code marker the run path injects, so
``wait.kind=exit`` on it is refused before anything is sent (spec 003 §6) with ``EXIT_WAIT_REFUSAL``;
``check_exit_wait`` raises it. Expansion happens before vault references (``{{vault.NAME}}``) are
resolved, so a macro's text may hold references.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tether.errors import UsageError
from tether.store.macros import Macro, MacroStore, MacroView

_INVOCATION_RE = re.compile(r"/([A-Za-z0-9_.-]{1,64})(?:[ \t]+(.*))?", re.DOTALL)
_PLACEHOLDER_RE = re.compile(r"\{\{([1-9@])\}\}")

# The spec's wording (003 §6): the marker name is the spec's, never the real per-run nonce.
EXIT_WAIT_REFUSAL = (
    'cannot wait for exit: expanded (no __DSH_EXIT__ marker would be injected); use wait.kind="idle", '
    'or wrap it in sh -c "…"'
)

Visible = Mapping[str, Macro] | Iterable[Macro]


@dataclass(frozen=True, slots=True, kw_only=True)
class MacroCall:
    """The syntactic parts of ``/NAME args`` (whether NAME is defined is not decided here)."""

    name: str
    args: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Expansion:
    """What to type. ``expanded`` False means ``text`` is the caller's command verbatim and
    ``macro`` is ``None``; ``submit`` is whether Enter follows (the macro's setting, else True)."""

    text: str
    expanded: bool = False
    macro: Macro | None = None
    submit: bool = True


def parse_macro_call(command: str) -> MacroCall | None:
    """``/NAME`` or ``/NAME args`` → its parts; anything else → ``None``."""
    match = _INVOCATION_RE.fullmatch(command)
    if match is None:
        return None
    return MacroCall(name=match[1], args=(match[2] or "").strip())


def _table(visible: Visible) -> Mapping[str, Macro]:
    if isinstance(visible, Mapping):
        return visible
    table: dict[str, Macro] = {}
    for macro in visible:
        table.setdefault(macro.name, macro)  # the first one wins, as in MacroStore.visible's order
    return table


def is_macro_invocation(command: str, visible: Visible) -> bool:
    """Whether ``command`` would expand: exactly ``/NAME [args]`` with NAME among ``visible``."""
    call = parse_macro_call(command)
    return call is not None and call.name in _table(visible)


def expand(command: str, visible: Visible) -> Expansion:
    """Expand ``command`` when it invokes a visible macro; else return it unchanged.

    Raises ``UsageError`` when the macro uses ``{{1}}``…``{{9}}`` and the arguments cannot be split
    (an unclosed quote).
    """
    call = parse_macro_call(command)
    if call is None:
        return Expansion(text=command)
    macro = _table(visible).get(call.name)
    if macro is None:
        return Expansion(text=command)
    return Expansion(text=fill(macro, call.args), expanded=True, macro=macro, submit=macro.submit)


def fill(macro: Macro, args: str) -> str:
    """The macro's text with ``args`` applied (see the module docstring)."""
    if _PLACEHOLDER_RE.search(macro.text) is None:
        return f"{macro.text.rstrip()} {args}" if args else macro.text
    words: list[str] = []
    if any(m[1] != "@" for m in _PLACEHOLDER_RE.finditer(macro.text)):
        try:
            words = shlex.split(args)
        except ValueError as exc:
            raise UsageError(
                f"arguments of macro /{macro.name} cannot be split into words ({exc}); close the quote, "
                "or pass them unsplit through {{@}}"
            ) from exc

    def one(match: re.Match[str]) -> str:
        key = match[1]
        if key == "@":
            return args
        index = int(key) - 1
        return shlex.quote(words[index]) if index < len(words) else ""

    return _PLACEHOLDER_RE.sub(one, macro.text)


def check_exit_wait(command: str, visible: Visible, wait_kind: str | None) -> None:
    """Refuse (``UsageError``, before sending) a macro invocation that asks for ``wait.kind=exit``."""
    if wait_kind == "exit" and is_macro_invocation(command, visible):
        raise UsageError(EXIT_WAIT_REFUSAL)


class MacroExpander:
    """Expansion bound to a home's macro store: ``expand(command, view)`` reads the visible macros
    only when the command looks like an invocation (no query for ordinary commands)."""

    def __init__(self, macros: MacroStore) -> None:
        self.macros = macros

    def visible_for(self, command: str, view: MacroView) -> Mapping[str, Macro]:
        call = parse_macro_call(command)
        if call is None:
            return {}
        found = self.macros.get(call.name, view)
        return {} if found is None else {found.name: found}

    def is_invocation(self, command: str, view: MacroView) -> bool:
        return bool(self.visible_for(command, view))

    def expand(self, command: str, view: MacroView) -> Expansion:
        return expand(command, self.visible_for(command, view))

    def check_exit_wait(self, command: str, view: MacroView, wait_kind: str | None) -> None:
        if wait_kind == "exit":
            check_exit_wait(command, self.visible_for(command, view), wait_kind)


__all__ = [
    "EXIT_WAIT_REFUSAL",
    "Expansion",
    "MacroCall",
    "MacroExpander",
    "check_exit_wait",
    "expand",
    "fill",
    "is_macro_invocation",
    "parse_macro_call",
]
