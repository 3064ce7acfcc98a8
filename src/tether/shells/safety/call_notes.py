"""What the safety path learned during one tool call, for that call's single audit record.

Invariant: the dispatcher opens one ``CallNotes`` per tool call (``collecting``) and writes one
audit record from it; code deeper down (the safety hooks, in tasks the call fans out to) only
adds to the notes of the call it runs in, found through a context variable — tasks created by
``asyncio.gather`` copy the context, so they see the same ``CallNotes`` object. Outside a call
(``current()`` is ``None``) noting is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

_CURRENT: ContextVar[CallNotes | None] = ContextVar("tether_call_notes", default=None)


@dataclass(slots=True)
class CallNotes:
    """``outcomes``: (shell, outcome, detail) of writes the safety path decided (refused, blocked,
    dry-run); ``flags``: e.g. ``bypass-guard``; ``commands``: commands as shown (macros expanded,
    references as written) when they differ from the call's arguments; ``reasons``: reasons
    someone other than the caller authored (a person who let a guard block through); ``hosts``:
    the host of each shell the call worked on."""

    outcomes: list[tuple[str, str, str]] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    commands: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    hosts: dict[str, str] = field(default_factory=dict)


def current() -> CallNotes | None:
    return _CURRENT.get()


def note_outcome(shell_id: str, outcome: str, detail: str = "") -> None:
    notes = _CURRENT.get()
    if notes is not None:
        notes.outcomes.append((shell_id, outcome, detail))


def note_flag(flag: str) -> None:
    notes = _CURRENT.get()
    if notes is not None:
        notes.flags.add(flag)


def note_reason(reason: str) -> None:
    notes = _CURRENT.get()
    if notes is not None and reason not in notes.reasons:
        notes.reasons.append(reason)


def note_command(shown: str) -> None:
    notes = _CURRENT.get()
    if notes is not None and shown not in notes.commands:
        notes.commands.append(shown)


def note_host(shell_id: str, host: str) -> None:
    notes = _CURRENT.get()
    if notes is not None:
        notes.hosts[shell_id] = host


@contextmanager
def collecting() -> Iterator[CallNotes]:
    notes = CallNotes()
    token = _CURRENT.set(notes)
    try:
        yield notes
    finally:
        _CURRENT.reset(token)
