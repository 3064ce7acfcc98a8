"""The renderer as it was before it was made linear, kept verbatim as the differential oracle.

Its ``_OVERLAY_RE`` and ``_TRAILING_RE`` rescan a long line from each of its positions (quadratic);
only tests feed it, on inputs small enough for that not to matter.
"""

from __future__ import annotations

import re

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


def render_text(raw: bytes, *, keep_trailing: bool = False) -> str:
    raw = _ESC_RE.sub(b"", _OSC_RE.sub(b"", raw))
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    if "\r" in text or "\b" in text:
        text = _OVERLAY_RE.sub(lambda m: _overlay(m.group(0)), text)
    text = _CTRL_RE.sub("", text.replace("\t", "    "))
    return text if keep_trailing else _TRAILING_RE.sub("", text)
