"""What a reader of a captured output stream gets back, and the reader interface itself.

Invariant: offsets count *bytes of the whole stream since spawn*, never characters and never
positions in a buffer, so an offset a caller saved stays meaningful however much of the stream has
been dropped from memory since. Text handed out never starts or ends inside a UTF-8 character:
a read that would cut one stops before it (``next_offset`` then points at its first byte).
``bytes_from`` is the one undecoded read, for a reader that passes the stream on unchanged: it
returns everything kept, to the last byte written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamRead:
    """One read over a captured stream.

    ``start`` is where the returned text begins (greater than the requested offset when those
    bytes were already dropped from memory, in which case ``lost`` is true); ``next_offset`` is
    the offset to pass next time; ``closed`` says the stream has ended and nothing will follow.
    """

    text: str
    start: int
    next_offset: int
    lost: bool
    closed: bool


class OutputReader(Protocol):
    """Non-consuming reads by offset over one captured stream (``observed.stdout``)."""

    @property
    def total_bytes(self) -> int:
        """Bytes written to the stream so far (kept or not)."""
        ...

    @property
    def closed(self) -> bool: ...

    def read_from(self, offset: int = 0) -> StreamRead: ...

    def bytes_from(self, offset: int = 0) -> tuple[bytes, int]:
        """The kept bytes from ``offset`` on, undecoded, and the offset they start at."""
        ...

    async def wait_beyond(self, offset: int) -> None:
        """Return once more than ``offset`` bytes were written, or the stream ended."""
        ...


class ObservedStreams(Protocol):
    """The two captured streams of one process, readable without consuming them."""

    @property
    def stdout(self) -> OutputReader: ...

    @property
    def stderr(self) -> OutputReader: ...
