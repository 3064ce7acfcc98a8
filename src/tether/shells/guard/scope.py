"""The variables a walk knows: what earlier text assigned, and what the shell itself reported.

Invariant: a lookup answers a value only when it is certain. ``complete`` says the shell reported
its whole state (``ShellState``): a variable it did not list is unset, so it expands to nothing
for sure; without it, an unlisted variable is unknown (``None``), judged as empty by the rules and
marked dynamic. A name assigned at run time to something the text does not show (``X=$(cat f)``,
``read X``) is unknown in both cases. Special parameters (``$?``, ``$$``, ``$!``, ``$RANDOM``) are
always unknown; positional parameters are known inside a function call the guard follows.
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_IFS = " \t\n"
_ALWAYS_UNKNOWN = frozenset(
    {"?", "$", "!", "-", "0", "RANDOM", "SRANDOM", "SECONDS", "EPOCHSECONDS", "EPOCHREALTIME", "LINENO"}
    | {"BASHPID", "HISTCMD", "PIPESTATUS", "BASH_COMMAND", "COMP_WORDS", "REPLY"}
)


class Scope:
    """Mutable along one walk (assignments update it); cheap to copy for a nested walk."""

    __slots__ = ("arrays", "complete", "cwd", "last_arg", "positional", "unknown", "vars")

    def __init__(
        self,
        known: Mapping[str, str] | None = None,
        *,
        arrays: Mapping[str, tuple[str, ...]] | None = None,
        complete: bool = False,
        unknown: set[str] | None = None,
        positional: tuple[str, ...] | None = None,
        last_arg: str | None = None,
        cwd: str = "",
    ) -> None:
        self.vars: dict[str, str] = dict(known or {})
        self.arrays: dict[str, tuple[str, ...]] = dict(arrays or {})
        self.complete = complete
        self.unknown: set[str] = set(unknown or ())
        self.positional = positional
        self.last_arg = last_arg
        self.cwd = cwd

    def copy(self) -> Scope:
        return Scope(
            self.vars,
            arrays=self.arrays,
            complete=self.complete,
            unknown=self.unknown,
            positional=self.positional,
            last_arg=self.last_arg,
            cwd=self.cwd,
        )

    # ---- reading --------------------------------------------------------------------------------

    def value(self, name: str) -> str | None:
        """``$name`` (``None``: only run time knows)."""
        if name.isdigit():
            if self.positional is None:
                return None
            index = int(name)
            return self.positional[index - 1] if 0 < index <= len(self.positional) else ""
        if name == "#":
            return str(len(self.positional)) if self.positional is not None else None
        if name in ("@", "*"):
            values = self.values(name)
            return " ".join(values) if values is not None else None
        if name == "_":
            return self.last_arg
        if name in _ALWAYS_UNKNOWN or name in self.unknown:
            return None
        if name == "PWD" and self.cwd:
            return self.cwd
        if name in self.vars:
            return self.vars[name]
        if name in self.arrays:
            elements = self.arrays[name]
            return elements[0] if elements else ""
        if name == "HOME" and not self.complete:
            return "~"
        return "" if self.complete else None

    def values(self, name: str) -> tuple[str, ...] | None:
        """``"${name[@]}"`` / ``"$@"``: every element (``None``: unknown)."""
        if name in ("@", "*"):
            return self.positional
        if name in self.unknown or name in _ALWAYS_UNKNOWN:
            return None
        if name in self.arrays:
            return self.arrays[name]
        one = self.value(name)
        return (one,) if one is not None else None

    def ifs(self) -> str | None:
        """The field separators unquoted expansions split on (``None``: unknown)."""
        if "IFS" in self.unknown:
            return None
        return self.vars.get("IFS", DEFAULT_IFS)

    # ---- writing --------------------------------------------------------------------------------

    def assign(self, name: str, value: str | None) -> None:
        self.arrays.pop(name, None)
        if value is None:
            self.vars.pop(name, None)
            self.unknown.add(name)
        else:
            self.vars[name] = value
            self.unknown.discard(name)

    def assign_array(self, name: str, values: tuple[str, ...] | None) -> None:
        self.vars.pop(name, None)
        if values is None:
            self.arrays.pop(name, None)
            self.unknown.add(name)
        else:
            self.arrays[name] = values
            self.unknown.discard(name)

    def unset(self, name: str) -> None:
        self.vars.pop(name, None)
        self.arrays.pop(name, None)
        self.unknown.discard(name)


def split_fields(value: str, ifs: str) -> list[str]:
    """Bash word splitting of an unquoted expansion's result (runs of IFS white space separate,
    each other IFS character ends a field)."""
    if not ifs:
        return [value] if value else []
    white = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    fields: list[str] = []
    current: list[str] = []
    index = 0
    text = value.strip(white) if white else value
    length = len(text)
    while index < length:
        char = text[index]
        if char in other:
            fields.append("".join(current))
            current = []
            index += 1
            while index < length and text[index] in white:
                index += 1
        elif char in white:
            while index < length and text[index] in white:
                index += 1
            if index < length and text[index] in other:
                continue
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
            index += 1
    if current:
        fields.append("".join(current))
    return fields
