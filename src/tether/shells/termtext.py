"""Terminal bytes → the text a model reads, with every shell-integration event removed.

Invariant: no text produced here contains an integration event or its nonce: events are OSC 6973
sequences (invisible on a terminal, kept in the raw log), and every OSC string is dropped, as is
every other escape sequence. What a person typed or tether loaded appears exactly as the shell
echoed it: there is no wrapper to hide.

Rendering is a line model, not a terminal emulator: escape sequences are dropped, ``\\r`` returns
to column 0 and overwrites (progress bars keep their last state), ``\\b`` steps back, a tab moves
to the next multiple of 8 columns as a terminal's tab stops do (a wide character counts two, a
combining one none), so columns printed with tabs line up as on the screen. Screen-exact views
come from tmux itself (``capture-pane``).
"""

from __future__ import annotations

import re
import unicodedata

_OSC_RE = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# The shell's "new row unless at column 0" before each prompt (the W event, then a row of blanks,
# ``\r`` and an erase; see ``tether.shells.integration.script``): the blanks and the ``\r`` would let
# the prompt overwrite output that did not end its line, so the whole of it becomes ``_FRESH``.
_FRESH_RE = re.compile(rb"\x1b\]6973;[0-9a-z]{4,32};W\x07 *\r\x1b\[K")
_FRESH = "\x1c\x1f\x1c"  # control characters (dropped), placed where the renderer decides
# What the renderer drops (``_CTRL_RE``): the prompt hook's own CAN and SI stand before ``_FRESH``.
_CONTROLS = "".join(chr(c) for c in (*range(0x08), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F))
_ESC_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|[PX^_][^\x1b]*\x1b\\|[()*+][0-~]|[@-Z\\-_=>78])")
_CTRL_RE = re.compile(r"[\x00-\x07\x0b-\x1f\x7f]")


def plain_bytes(raw: bytes) -> bytes:
    """Drop OSC strings and other escape sequences (a lone ESC left over is a control char)."""
    raw = _OSC_RE.sub(b"", raw)
    return _ESC_RE.sub(b"", raw)


def has_bell(raw: bytes) -> bool:
    """A BEL that is a bell, not the terminator of an OSC string."""
    return b"\x07" in _OSC_RE.sub(b"", raw)


_MOVE_RE = re.compile(r"[\r\b]")
_PIECE_RE = re.compile(r"[\r\b]|[^\r\b]+")


def _overlay(line: str) -> str:
    """One line with ``\\r``/``\\b`` → what a terminal shows, in time linear in the line.

    The line is cut into runs of printable text and single moves; a run overwrites the buffer
    from the column by slice assignment, which costs the run's length whether it overwrites or
    extends (a slice that reaches the buffer's end shifts nothing), so ``x`` × 1 MB followed by a
    million ``\\ra`` is a million O(1) writes, never a copy of the buffer per ``\\r``.
    """
    if "\r" not in line and "\b" not in line:
        return line
    buf: list[str] = []
    col = 0
    for piece in _PIECE_RE.findall(line):
        if piece == "\r":
            col = 0
        elif piece == "\b":
            col = max(0, col - 1)
        else:
            end = col + len(piece)
            buf[col:end] = piece
            col = end
    return "".join(buf)


def _overlay_lines(text: str) -> str:
    """Apply ``_overlay`` to each line holding a move, touching every character once.

    A search for the next move, then the bounds of its line by ``rfind``/``find``: no pattern of
    the form ``[^\\n]*[\\r\\b]`` that rescans a long line from each of its positions (that was
    quadratic: a 20 kB line before any ``\\r`` took 1.7 s).
    """
    out: list[str] = []
    done = 0  # text[:done] is already in out
    while (hit := _MOVE_RE.search(text, done)) is not None:
        start = text.rfind("\n", done, hit.start()) + 1 or done
        end = text.find("\n", hit.start())
        if end < 0:
            end = len(text)
        out.append(text[done:start])
        out.append(_overlay(text[start:end]))
        done = end
    out.append(text[done:])
    return "".join(out)


_TAB = 8
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufe0e\ufe0f")


def _cells(ch: str) -> int:
    """Columns ``ch`` takes on a terminal: two for a wide (East Asian wide or full-width) one,
    none for a combining mark or a joiner."""
    if ch < "\u0300":
        return 1
    if ch in _ZERO_WIDTH or unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def expand_tabs(text: str) -> str:
    """Each tab → the blanks up to the next tab stop of its line (every 8 columns), linear."""
    if "\t" not in text:
        return text
    if text.isascii():
        return text.expandtabs(_TAB)
    out: list[str] = []
    for line in text.split("\n"):
        if "\t" not in line or line.isascii():
            out.append(line.expandtabs(_TAB))
            continue
        col = 0
        parts: list[str] = []
        for ch in line:
            if ch == "\t":
                blanks = _TAB - col % _TAB
                parts.append(" " * blanks)
                col += blanks
            else:
                parts.append(ch)
                col += _cells(ch)
        out.append("".join(parts))
    return "\n".join(out)


def clean_line(line: str) -> str:
    """Filter one already-rendered line (a screen row): control characters out."""
    return expand_tabs(_CTRL_RE.sub("", line)).rstrip()


# The look-behind makes a run of blanks match only from its first character: ``[ \t]+$`` alone
# retries from every position of a run that does not end the line (quadratic in the run).
_TRAILING_RE = re.compile(r"(?m)(?<![ \t])[ \t]+$")


_SLICE = 256 * 1024


def _open_string(raw: bytes, start: int, end: int, *, osc: bool) -> int:
    """Where an escape string still open at ``end`` begins in ``raw[start:end]``, or -1: an OSC
    (``osc``; it ends at BEL or ESC), else a DCS/SOS/PM/APC (it ends at ESC) in OSC-free bytes.
    Every opener starts with ESC and no string spans an ESC, so only the last ESC can open one."""
    at = raw.rfind(b"\x1b", start, end)
    kind = raw[at + 1 : at + 2]
    if at < 0 or (osc and kind != b"]") or (not osc and kind not in (b"P", b"X", b"^", b"_")):
        return -1
    if osc and raw.find(b"\x07", at + 2, end) >= 0:
        return -1
    return at


def _slices(raw: bytes, *, osc: bool) -> list[bytes]:
    """``raw`` cut after newlines outside escape strings (see ``_open_string``), pieces of about
    ``_SLICE`` bytes (one long line stays whole). Linear: a cut inside a string moves past the
    string's end. Every pattern of a render pass matches within a line except those strings, so
    a pass over the pieces one by one equals a pass over ``raw``."""
    out: list[bytes] = []
    pos = 0
    closers = (b"\x1b", b"\x07") if osc else (b"\x1b",)
    while len(raw) - pos > _SLICE:
        cut = raw.rfind(b"\n", pos, pos + _SLICE)
        if cut < 0:
            cut = raw.find(b"\n", pos + _SLICE)
        while cut >= 0 and _open_string(raw, pos, cut + 1, osc=osc) >= 0:
            ends = [i for i in (raw.find(c, cut + 1) for c in closers) if i >= 0]
            cut = raw.find(b"\n", min(ends)) if ends else -1
        if cut < 0:
            break
        out.append(raw[pos : cut + 1])
        pos = cut + 1
    out.append(raw[pos:])
    return out


def render_text(raw: bytes, *, keep_trailing: bool = False) -> str:
    """Raw terminal bytes → display text, in whole-buffer passes (fast for hundreds of MB).

    Every pass is linear in the input: each pattern here either matches a bounded length or can
    start only where the previous attempt stopped (a program's output is hostile input). A big
    buffer is processed in pieces (``_slices``), so no single regex pass holds the interpreter for
    long and a render on a worker thread lets the event loop in every few milliseconds.
    """
    if len(raw) <= _SLICE:
        return _render_plain(_strip_osc(raw), keep_trailing)
    plain = b"".join(_strip_osc(piece) for piece in _slices(raw, osc=True))
    return "".join(_render_plain(piece, keep_trailing) for piece in _slices(plain, osc=False))


def _strip_osc(raw: bytes) -> bytes:
    if b";W\x07" in raw:
        raw = _FRESH_RE.sub(_FRESH.encode(), raw)
    return _OSC_RE.sub(b"", raw)


def _fresh_rows(text: str) -> str:
    """Each ``_FRESH`` → a newline where the cursor is not at column 0 (after text that did not end
    its line, ignoring the control characters the prompt hook printed before it), else nothing: a
    line ended by ``\r`` is overwritten by the prompt, as on the screen. Linear: each part is
    stripped once."""
    parts = text.split(_FRESH)
    out = [parts[0]]
    fresh = parts[0].rstrip(_CONTROLS)[-1:] in ("", "\n", "\r")
    for part in parts[1:]:
        if not fresh:
            out.append("\n")
        out.append(part)
        tail = part.rstrip(_CONTROLS)
        fresh = not tail or tail[-1] in "\n\r"  # nothing after it: at column 0 (its own newline)
    return "".join(out)


def _render_plain(raw: bytes, keep_trailing: bool) -> str:
    """``render_text`` of bytes without OSC strings."""
    text = _ESC_RE.sub(b"", raw).decode("utf-8", "replace").replace("\r\n", "\n")
    if _FRESH in text:
        text = _fresh_rows(text)
    if "\r" in text or "\b" in text:
        text = _overlay_lines(text)
    text = expand_tabs(_CTRL_RE.sub("", text))
    return text if keep_trailing else _TRAILING_RE.sub("", text)


def render(raw: bytes) -> list[str]:
    """Raw terminal bytes → display lines (a last line without a newline is kept)."""
    text = render_text(raw)
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def filter_screen(lines: list[str]) -> list[str]:
    """tmux ``capture-pane`` lines: control characters out, trailing blank lines dropped."""
    out = [clean_line(line) for line in lines]
    while out and not out[-1]:
        out.pop()
    return out
