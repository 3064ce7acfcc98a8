"""Terminal bytes → the text a model reads, with every shell-integration event removed.

Invariant: no text produced here contains an integration event or its nonce: events are OSC 6973
sequences (invisible on a terminal, kept in the raw log), and every OSC string is dropped, as is
every other escape sequence. What a person typed or tether loaded appears exactly as the shell
echoed it: there is no wrapper to hide.

Rendering is a line model, not a terminal emulator: escape sequences are dropped, ``\\r`` returns
to column 0 and overwrites (progress bars keep their last state), ``\\b`` steps back. Screen-exact
views come from tmux itself (``capture-pane``).
"""

from __future__ import annotations

import re

_OSC_RE = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_ESC_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|[PX^_][^\x1b]*\x1b\\|[()*+][0-~]|[@-Z\\-_=>78])")
_CTRL_RE = re.compile(r"[\x00-\x07\x0b-\x1f\x7f]")


def plain_bytes(raw: bytes) -> bytes:
    """Drop OSC strings and other escape sequences (a lone ESC left over is a control char)."""
    raw = _OSC_RE.sub(b"", raw)
    return _ESC_RE.sub(b"", raw)


def has_bell(raw: bytes) -> bool:
    """A BEL that is a bell, not the terminator of an OSC string."""
    return b"\x07" in _OSC_RE.sub(b"", raw)


def _overlay(line: str) -> str:
    if "\r" not in line and "\b" not in line:
        return line
    buf: list[str] = []
    col = 0
    for ch in line:
        if ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        else:
            if col < len(buf):
                buf[col] = ch
            else:
                buf.append(ch)
            col += 1
    return "".join(buf)


def clean_line(line: str) -> str:
    """Filter one already-rendered line (a screen row): control characters out."""
    return _CTRL_RE.sub("", line.replace("\t", "    ")).rstrip()


_OVERLAY_RE = re.compile(r"[^\n]*[\r\b][^\n]*")
_TRAILING_RE = re.compile(r"(?m)[ \t]+$")


def render_text(raw: bytes, *, keep_trailing: bool = False) -> str:
    """Raw terminal bytes → display text, in whole-buffer passes (fast for hundreds of MB)."""
    text = plain_bytes(raw).decode("utf-8", "replace").replace("\r\n", "\n")
    if "\r" in text or "\b" in text:
        text = _OVERLAY_RE.sub(lambda m: _overlay(m.group(0)), text)
    text = _CTRL_RE.sub("", text.replace("\t", "    "))
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
