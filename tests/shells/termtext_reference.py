"""The renderer as it was before it was made linear, kept verbatim as the differential oracle.

Its ``_OVERLAY_RE`` and ``_TRAILING_RE`` rescan a long line from each of its positions (quadratic);
only tests feed it, on inputs small enough for that not to matter.
"""

from __future__ import annotations

import re
import unicodedata

_OSC_RE = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_ESC_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|[PX^_][^\x1b]*\x1b\\|[()*+][0-~]|[@-Z\\-_=>78])")
_CTRL_RE = re.compile(r"[\x00-\x07\x0b-\x1f\x7f]")
_OVERLAY_RE = re.compile(r"[^\n]*[\r\b][^\n]*")
_TRAILING_RE = re.compile(r"(?m)[ \t]+$")


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


def _tabs(text: str) -> str:
    """Tab stops every 8 columns, a character at a time (tabs were 4 blanks before)."""
    out = []
    col = 0
    for ch in text:
        if ch == "\n":
            out.append(ch)
            col = 0
        elif ch == "\t":
            out.append(" " * (8 - col % 8))
            col += 8 - col % 8
        else:
            out.append(ch)
            wide = unicodedata.east_asian_width(ch) in ("W", "F")
            col += (
                0
                if unicodedata.combining(ch) or ch in "\u200b\u200c\u200d\u2060\ufe0e\ufe0f"
                else 2
                if wide
                else 1
            )
    return "".join(out)


def render_text(raw: bytes, *, keep_trailing: bool = False) -> str:
    raw = _ESC_RE.sub(b"", _OSC_RE.sub(b"", raw))
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    if "\r" in text or "\b" in text:
        text = _OVERLAY_RE.sub(lambda m: _overlay(m.group(0)), text)
    text = _tabs(_CTRL_RE.sub("", text))
    return text if keep_trailing else _TRAILING_RE.sub("", text)
