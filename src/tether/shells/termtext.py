"""Terminal bytes → the text a model reads, with every trace of tether's wrapper removed.

Invariant: no text produced here contains a run marker, a nonce or the wrapper's own words.
Markers are OSC 6973 sequences (invisible on a terminal, kept in the raw log); the echoed wrapper
(`` __tb NONCE;{ `` before the command, ``};__te`` on the continuation line) is cut out of echoed
command lines, and a final scrub removes any fragment that slipped through a redraw.

Rendering is a line model, not a terminal emulator: escape sequences are dropped, ``\\r`` returns
to column 0 and overwrites (progress bars keep their last state), ``\\b`` steps back. Screen-exact
views come from tmux itself (``capture-pane``).
"""

from __future__ import annotations

import re

MARKER_RE = re.compile(rb"\x1b\]6973;([0-9a-z*]+);(b|e;(\d+))(?:\x1b\\|\x07)")
_OSC_RE = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_ESC_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|[PX^_][^\x1b]*\x1b\\|[()*+][0-~]|[@-Z\\-_=>78])")
_CTRL_RE = re.compile(r"[\x00-\x07\x0b-\x1f\x7f]")
_ECHO_HEAD_RE = re.compile(r" ?__tb [0-9a-z]{4,16};\{ ?")
_ECHO_TAIL_RE = re.compile(r"\};__te\s*$")
_SCRUB_RE = re.compile(r"__tb [0-9a-z]*;?\{?|\};__te|__t[bep]\b|\x1b\]6973[^\n]*")


def strip_markers(raw: bytes) -> bytes:
    return MARKER_RE.sub(b"", raw)


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
    """Filter one already-rendered line: wrapper echo out, control characters out."""
    if "__t" in line or "\x1b" in line:
        line = _ECHO_HEAD_RE.sub("", line, count=1)
        line = _SCRUB_RE.sub("", line)
    return _CTRL_RE.sub("", line.replace("\t", "    ")).rstrip()


def is_wrapper_tail(line: str) -> bool:
    """The continuation line holding only ``};__te`` (behind a PS2 prompt): not shown at all."""
    return _ECHO_TAIL_RE.search(line) is not None and len(line) <= 48


_OVERLAY_RE = re.compile(r"[^\n]*[\r\b][^\n]*")
_TAIL_LINE_RE = re.compile(r"(?m)^.{0,42}\};__te[ \t]*(?:\n|$)")
_TRAILING_RE = re.compile(r"(?m)[ \t]+$")


def render_text(raw: bytes, *, keep_trailing: bool = False) -> str:
    """Raw terminal bytes → display text, in whole-buffer passes (fast for hundreds of MB)."""
    text = plain_bytes(strip_markers(raw)).decode("utf-8", "replace").replace("\r\n", "\n")
    if "\r" in text or "\b" in text:
        text = _OVERLAY_RE.sub(lambda m: _overlay(m.group(0)), text)
    if "__t" in text:
        text = _TAIL_LINE_RE.sub("", text)
        text = _ECHO_HEAD_RE.sub("", text)
        text = _SCRUB_RE.sub("", text)
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
    """tmux ``capture-pane`` lines: the same wrapper filtering, trailing blank lines dropped."""
    out = [clean_line(line) for line in lines if not is_wrapper_tail(line)]
    while out and not out[-1]:
        out.pop()
    return out
