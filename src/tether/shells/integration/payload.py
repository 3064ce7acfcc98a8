"""What the loader reads from the terminal: one line of printable ASCII that decodes exactly.

Invariant: ``encode`` maps any bytes to printable ASCII without ``|`` or ``~`` (the field separator
and the end mark of a payload), and bash's ``printf '%b'`` maps it back byte for byte: every byte
outside printable ASCII, and ``\\``, ``|`` and ``~``, becomes ``\\xHH``. A payload is therefore
safe to send as plain keys to a terminal in readline's mode (no control character, nothing the
line discipline or a key binding acts on), at any length.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.shells.integration.script import PAYLOAD_END

_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("\\"), ord("|"), ord("~")}
_TABLE = [chr(b) if b in _PLAIN else f"\\x{b:02x}" for b in range(256)]


def encode(data: bytes) -> str:
    return "".join(_TABLE[b] for b in data)


def to_bytes(text: str) -> bytes:
    """Text as the shell should receive it (lone surrogates are the raw bytes they carry)."""
    return text.encode("utf-8", "surrogateescape")


def _payload(kind: str, token: int, text: str, variables: Mapping[str, str] | None) -> str:
    fields = [kind, str(token), encode(to_bytes(text))]
    fields += [f"{name}={encode(to_bytes(value))}" for name, value in (variables or {}).items()]
    return "|".join(fields) + PAYLOAD_END


def run_payload(token: int, command: str, variables: Mapping[str, str] | None = None) -> str:
    """Replace the line with ``command`` and mark it as run ``token`` (then RUN_KEYS accept it).
    The cursor goes to the line's start (see the loader: a cursor at the end costs bash time
    quadratic in the line's length)."""
    return _payload("r", token, command, variables)


def held_payload(text: str, variables: Mapping[str, str] | None = None) -> str:
    """Replace the line with ``text`` and keep it there, the cursor at its end (an incomplete
    line: the next line typed continues it; vault ``variables`` are set for when it runs)."""
    return _payload("h", 0, text, variables)


def insert_payload(text: str, variables: Mapping[str, str] | None = None) -> str:
    """Insert ``text`` at the cursor of the line being edited (nothing is accepted); vault
    ``variables`` are set for the line a later Enter runs."""
    return _payload("i", 0, text, variables)


def append_payload(text: str) -> str:
    """Append ``text`` at the end of the line being edited, the cursor after it (nothing accepted)."""
    return _payload("a", 0, text, None)


def report_payload(seq: str) -> str:
    """What the reporter reads: the request's id, echoed in its ``L`` event."""
    return f"{seq}|" + PAYLOAD_END


def decode_quoted(quoted: str) -> str:
    """A string as bash's ``${VAR@Q}`` quotes it (``'…'``, ``'\\''``, ``$'…'``), back to its text."""
    from tether.shells.guard import decode_ansi_c

    out: list[str] = []
    index = 0
    while index < len(quoted):
        if quoted.startswith("$'", index):
            end = index + 2
            while end < len(quoted) and quoted[end] != "'":
                end += 2 if quoted[end] == "\\" else 1
            out.append(decode_ansi_c(quoted[index + 2 : end]))
            index = end + 1
        elif quoted[index] == "'":
            end = quoted.find("'", index + 1)
            end = len(quoted) if end < 0 else end
            out.append(quoted[index + 1 : end])
            index = end + 1
        elif quoted[index] == "\\" and index + 1 < len(quoted):
            out.append(quoted[index + 1])
            index += 2
        else:
            out.append(quoted[index])
            index += 1
    return "".join(out)
