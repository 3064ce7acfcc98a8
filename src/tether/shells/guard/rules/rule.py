"""What a guard rule is: an id, a one-line summary, advice, and a judge of one event.

Invariant: a judge answers *why* an event is dangerous, or ``None``; it never raises and never
does I/O. ``CommandMatch`` is the one declarative shape (command-name globs plus argument globs)
shared by default rules and every ``[[guard.rules]]`` entry in ``config.toml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from tether.shells.guard.events import Event, Invocation


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleEnv:
    """What a rule may consult besides the event: directories the operator also protects, and
    tether's own tmux socket (``$TETHER_HOME/tmux.sock``, in each spelling of the home: as given
    and with its symbolic links resolved; empty when unknown)."""

    protect: tuple[str, ...] = ()
    tether_sockets: tuple[str, ...] = ()


Judge = Callable[[Event, RuleEnv], str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A named rule: ``judge`` says why an event is dangerous; ``advice`` says what to do instead."""

    id: str
    summary: str
    advice: str
    judge: Judge = field(compare=False, repr=False)
    builtin: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandMatch:
    """``command`` + argument globs, the shape of every ``[[guard.rules]]`` entry."""

    commands: tuple[str, ...]
    args_any: tuple[str, ...] = ()
    args_all: tuple[str, ...] = ()
    why: str

    def __call__(self, event: Event, env: RuleEnv) -> str | None:
        if not isinstance(event, Invocation) or not any(fnmatchcase(event.name, p) for p in self.commands):
            return None
        values = [word.value for word in event.args]
        if self.args_any and not any(fnmatchcase(v, p) for v in values for p in self.args_any):
            return None
        if not all(any(fnmatchcase(v, p) for v in values) for p in self.args_all):
            return None
        return self.why
