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


def run_payload(token: int, command: str, variables: Mapping[str, str] | None = None) -> str:
    """Replace the line with ``command`` and mark it as run ``token`` (then RUN_KEYS accept it)."""
    fields = ["r", str(token), encode(to_bytes(command))]
    fields += [f"{name}={encode(to_bytes(value))}" for name, value in (variables or {}).items()]
    return "|".join(fields) + PAYLOAD_END


def insert_payload(text: str, variables: Mapping[str, str] | None = None) -> str:
    """Insert ``text`` at the cursor of the line being edited (nothing is accepted); vault
    ``variables`` are set for the line a later Enter runs."""
    fields = ["i", "0", encode(to_bytes(text))]
    fields += [f"{name}={encode(to_bytes(value))}" for name, value in (variables or {}).items()]
    return "|".join(fields) + PAYLOAD_END
