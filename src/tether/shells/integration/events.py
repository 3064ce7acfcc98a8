"""Shell-integration events in a pane's log: what the shell itself reported, and where.

Invariant: an event counts only if it carries the shell's own nonce; everything else that looks
like a marker is program output. Offsets are log offsets (``logs``): ``start`` is where the
sequence begins, ``end`` just after it. ``EventScanner`` reads forward from any offset and never
splits a sequence across two reads (a partial one is carried to the next read).

Commands are bracketed by the events the integration prints (see ``script``)::

    P (prompt shown) … line echoed … C (PS0: the line runs) … output … E … [H] … P (next prompt)

A command is therefore "C, then the first displayed P after it"; a P without a C since the
previous P is a redraw, an empty line or a line bash could not parse (its status says which).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Literal

EventKind = Literal["P", "C", "E", "Q", "H", "X", "L"]
# The sequence every view removes (any nonce: a forged or foreign marker is hidden as well).
ANY_MARKER_RE = re.compile(rb"\x1b\]6973;[^\x07\x1b]*(?:\x07|\x1b\\)")
_MARKER_RE = re.compile(rb"\x1b\]6973;([0-9a-z]{4,32});([PCEQHXL])(?:;([^\x07\x1b]*))?(?:\x07|\x1b\\)")
_OPEN = b"\x1b]6973;"
# The mark ``ShellHost.sync_log`` prints to prove a log caught up: not the shell's, not output.
_SYNC_ONLY_RE = re.compile(rb"(?:\x1b\]6973;sync;[0-9a-f]{16}\x07)+")
_MAX_MARKER = 1 << 20  # an H event (a command's text) may be long; longer is not ours


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellEvent:
    kind: EventKind
    start: int
    end: int
    status: int | None = None  # P, E: $? of the last command line (E: if known); X: the exit status
    prompt: int = 0  # P: the prompt's number (a redraw repeats it)
    token: int = 0  # C: the run token the loader set (0: not a tether run)
    text: str = ""  # H: the command as bash's history holds it; L: readline's line (@Q-quoted)
    seq: str = ""  # L: the request it answers
    at: float | None = None  # P, C, E: when the shell printed it (epoch seconds), if it said
    number: int | None = None  # the shell's count of its events (``None``: a shell that does not say)


def _time(fields: list[bytes], index: int) -> float | None:
    if len(fields) <= index:
        return None
    try:  # EPOCHREALTIME uses the locale's decimal point
        return float(fields[index].replace(b",", b"."))
    except ValueError:
        return None


def _int(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0


def _number(fields: list[bytes], index: int) -> int | None:
    """The event's number, if the shell wrote one there (shells started before tether numbered
    their events write none)."""
    if len(fields) <= index or not fields[index].isdigit():
        return None
    return int(fields[index])


_H_NUMBER_RE = re.compile(rb"(\d+);")


def parse_event(nonce: str, kind: bytes, payload: bytes | None, start: int, end: int) -> ShellEvent | None:
    fields = (payload or b"").split(b";")
    k = kind.decode()
    if k == "P":
        return ShellEvent(
            kind="P",
            start=start,
            end=end,
            status=_int(fields[0]),
            prompt=_int(fields[1]) if len(fields) > 1 else 0,
            at=_time(fields, 2),
            number=_number(fields, 3),
        )
    if k == "C":
        return ShellEvent(
            kind="C",
            start=start,
            end=end,
            token=_int(fields[0]),
            at=_time(fields, 1),
            number=_number(fields, 2),
        )
    if k == "E":
        # No status: a hook ran before tether's, so the ``$?`` it saw was not the line's.
        status = _int(fields[0]) if fields[0] else None
        return ShellEvent(
            kind="E", start=start, end=end, status=status, at=_time(fields, 1), number=_number(fields, 2)
        )
    if k == "X":
        return ShellEvent(kind="X", start=start, end=end, status=_int(fields[0]), number=_number(fields, 1))
    if k == "L":
        seq, _, line = (payload or b"").partition(b";")
        return ShellEvent(
            kind="L",
            start=start,
            end=end,
            seq=seq.decode("ascii", "replace"),
            text=line.decode("utf-8", "surrogateescape"),
        )
    if k == "H":
        # ``history 1`` starts with blanks or the history number and two blanks, never "N;".
        numbered = _H_NUMBER_RE.match(payload or b"")
        number = int(numbered.group(1)) if numbered else None
        raw = (payload or b"")[numbered.end() :] if numbered else (payload or b"")
        text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
        # ``history 1`` prints "  123  command"; the number is bash's, not the command's.
        head, _, rest = text.lstrip(" ").partition("  ")
        cmd = rest if head.isdigit() else text
        return ShellEvent(kind="H", start=start, end=end, text=cmd.rstrip("\n"), number=number)
    return ShellEvent(kind="Q", start=start, end=end, number=_number(fields, 0))


class EventScanner:
    """Feeds log bytes forward and yields the shell's events (``nonce`` only), each once.

    The shell numbers its events; one whose number is not above the last one read is not the
    shell speaking now: a program printed it again (the shell's own log holds its nonce, so a
    ``cat`` of that log prints events of the shell's own) or readline redrew a prompt. It is
    dropped. ``after``: the highest number the shell had used before ``start`` (or any event
    before ``start`` showed), when the caller knows it: a scanner that starts inside such a
    replay learns the real numbers only from the shell's next event."""

    def __init__(self, nonce: str, start: int, *, after: int = 0) -> None:
        self.nonce = nonce.encode()
        self.pos = start  # offset of the next byte fed
        self.number = after  # the highest event number read so far
        self._carry = b""

    @property
    def open(self) -> bool:
        """A sequence read so far is not finished: it ends in bytes after ``pos``."""
        return bool(self._carry)

    def feed(self, data: bytes) -> list[ShellEvent]:
        base = self.pos - len(self._carry)
        buf = self._carry + data
        self.pos += len(data)
        events: list[ShellEvent] = []
        keep_from = len(buf)
        for m in _MARKER_RE.finditer(buf):
            if m.group(1) != self.nonce:
                continue
            ev = parse_event(self.nonce.decode(), m.group(2), m.group(3), base + m.start(), base + m.end())
            if ev is None:
                continue
            if ev.number is not None:
                if ev.number <= self.number:
                    continue  # printed again (a replay of the log, or a redrawn prompt)
                self.number = ev.number
            events.append(ev)
        # A sequence still open at the end of this read continues in the next one.
        tail = buf.rfind(_OPEN, max(0, len(buf) - _MAX_MARKER))
        if tail >= 0 and _MARKER_RE.match(buf, tail) is None and b"\x07" not in buf[tail:]:
            keep_from = tail
        elif len(buf) >= len(_OPEN):
            # The opener itself may be split: keep a prefix of it.
            for n in range(len(_OPEN) - 1, 0, -1):
                if buf.endswith(_OPEN[:n]):
                    keep_from = len(buf) - n
                    break
        self._carry = buf[keep_from:]
        return events


def sync_mark() -> bytes:
    """A new, unique mark for ``ShellHost.sync_log`` (hidden by every view, as any marker is)."""
    return b"\x1b]6973;sync;" + secrets.token_hex(8).encode() + b"\x07"


def only_sync_marks(data: bytes) -> bool:
    """``data`` is nothing but whole sync marks: the log grew, but nothing in the pane printed."""
    return _SYNC_ONLY_RE.fullmatch(data) is not None  # fails at the first other byte, copies nothing
