"""Bounded capture of one output stream: a memory tail plus an optional capped spill file.

Invariant: memory never holds more than about ``2 × max_bytes`` of a stream however long it is
(the logical tail is the last ``max_bytes``; the physical buffer is compacted lazily so a long run
of small writes costs amortised O(1) per byte). The spill file, when enabled, holds the *whole*
stream from byte 0 or does not exist: it is created the first time the stream outgrows memory,
and deleted (``spill_path`` becomes None) the moment the stream would outgrow ``max_spill_bytes``.
Truncation is always reported. Decoding replaces invalid bytes and never splits a UTF-8 character.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from tether.process.reads import StreamRead


def _utf8_start(data: bytes | bytearray | memoryview, limit: int = 3) -> int:
    """Bytes to skip at the front so text does not start inside a character."""
    skip = 0
    while skip < min(limit, len(data)) and 0x80 <= data[skip] <= 0xBF:
        skip += 1
    return skip


def _utf8_rest(data: bytes | bytearray | memoryview, pos: int) -> int:
    """Bytes at ``pos`` that end a character which began before it (0 when ``pos`` is a boundary).

    Looks back at most three bytes for the lead byte; continuation bytes with no lead before them
    (binary output) are not a character's rest, and are kept."""
    for back in range(1, 4):
        if pos - back < 0:
            return 0
        byte = data[pos - back]
        if 0x80 <= byte <= 0xBF:
            continue
        need = 2 if 0xC0 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else 4 if 0xF0 <= byte <= 0xF7 else 1
        rest = 0
        while rest < need - back and pos + rest < len(data) and 0x80 <= data[pos + rest] <= 0xBF:
            rest += 1
        return rest
    return 0


def _utf8_incomplete_tail(data: bytes | bytearray | memoryview) -> int:
    """Length of a trailing, still-incomplete UTF-8 sequence (0 when the end is a boundary)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if 0x80 <= byte <= 0xBF:
            continue
        if byte >= 0xF0:
            need = 4
        elif byte >= 0xE0:
            need = 3
        elif byte >= 0xC0:
            need = 2
        else:
            return 0
        return back if back < need and byte <= 0xF7 else 0
    return 0


def decode(data: bytes | bytearray | memoryview) -> str:
    return bytes(data).decode("utf-8", errors="replace")


class CapturedStream:
    """One stream's captured bytes: tail in memory, whole stream optionally in a spill file."""

    __slots__ = (
        "_base",
        "_buf",
        "_closed",
        "_max_bytes",
        "_max_spill",
        "_spill_fd",
        "_spill_gone",
        "_spill_path",
        "_spill_refused",
        "_waiters",
    )

    def __init__(self, *, max_bytes: int, max_spill_bytes: int = 0, spill_path: Path | None = None) -> None:
        self._max_bytes = max(0, max_bytes)
        self._buf = bytearray()
        self._base = 0  # stream offset of _buf[0]
        self._closed = False
        self._max_spill = max_spill_bytes if spill_path is not None else 0
        self._spill_path = spill_path
        self._spill_fd: int | None = None
        self._spill_gone = False  # the spill outgrew its cap (or failed) and was deleted
        self._spill_refused: str | None = None  # why the file system would not keep it, if it did not
        self._waiters: list[asyncio.Future[None]] = []

    # -- writing -----------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        if not chunk or self._closed:
            return
        self._append(chunk)
        self._wake()

    def _append(self, chunk: bytes) -> None:
        total_before = self._base + len(self._buf)
        self._spill(chunk, total_before)
        cap = self._max_bytes
        if len(chunk) >= cap:
            # The chunk alone fills the tail: keep only its end, nothing else survives.
            self._buf = bytearray(chunk[len(chunk) - cap :]) if cap else bytearray()
            self._base = total_before + len(chunk) - cap
            return
        self._buf += chunk
        excess = len(self._buf) - cap
        if excess > max(cap, 65536):
            del self._buf[:excess]
            self._base += excess

    def _spill(self, chunk: bytes, total_before: int) -> None:
        if self._spill_path is None or self._spill_gone:
            return
        total_after = total_before + len(chunk)
        if total_after > self._max_spill:
            self._drop_spill()
            return
        if self._spill_fd is None:
            if total_after <= self._max_bytes:
                return  # still fits in memory; no file needed yet
            try:
                self._spill_fd = os.open(
                    self._spill_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
                )
                # Nothing has been dropped from memory yet, so the buffer is the whole stream.
                self._write_all(bytes(self._buf))
            except OSError as exc:
                self._refused(exc)
                return
        try:
            self._write_all(chunk)
        except OSError as exc:
            self._refused(exc)

    def _refused(self, exc: OSError) -> None:
        # A full disk (or a read-only one) cost the whole stream: the result says so, and where.
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        self._spill_refused = f"tether could not write {self._spill_path} ({why})"
        self._drop_spill()

    def _write_all(self, data: bytes) -> None:
        assert self._spill_fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._spill_fd, view)
            view = view[written:]

    def _drop_spill(self) -> None:
        self._spill_gone = True
        if self._spill_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._spill_fd)
            self._spill_fd = None
            if self._spill_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self._spill_path)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_beyond(self, offset: int) -> None:
        """Return once the stream has more than ``offset`` bytes, or has ended."""
        if self._closed or self.total_bytes > offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def close(self) -> None:
        """The stream ended: no more bytes; the spill file (if any) is complete."""
        self._closed = True
        self._wake()
        if self._spill_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._spill_fd)
            self._spill_fd = None

    # -- reading -----------------------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return self._base + len(self._buf)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self._max_bytes

    @property
    def spill_path(self) -> str | None:
        """The complete stream on disk, or None (never needed, disabled, or over the cap)."""
        if self._spill_gone or self._spill_path is None or not self.truncated:
            return None
        return str(self._spill_path)

    @property
    def spill_refused(self) -> str | None:
        """Why no spill file holds the stream when the file system refused it (a full disk), else None."""
        return self._spill_refused

    def _kept_start(self) -> int:
        return max(self._base, self.total_bytes - self._max_bytes)

    def read_from(self, offset: int = 0) -> StreamRead:
        total = self.total_bytes
        offset = max(0, offset)
        kept = self._kept_start()
        lost = offset < kept
        start = max(offset, kept)
        if start >= total:
            return StreamRead(text="", start=total, next_offset=total, lost=lost, closed=self._closed)
        view = memoryview(self._buf)[start - self._base :]
        if start > self._base:
            # An offset inside a character (a saved ``total_bytes`` taken while one was half
            # written, or the first kept byte of a cut tail) starts after that character.
            skip = _utf8_rest(self._buf, start - self._base)
        else:
            # Nothing before it is in memory to tell: a read that lost its start skips stray
            # continuation bytes (a cut character); one that did not takes the bytes it asked for.
            skip = _utf8_start(view) if lost else 0
        view, start = view[skip:], start + skip
        hold = 0 if self._closed else _utf8_incomplete_tail(view)
        end = len(view) - hold
        text = decode(view[:end])
        view.release()
        return StreamRead(text=text, start=start, next_offset=start + end, lost=lost, closed=self._closed)

    def bytes_from(self, offset: int = 0) -> tuple[bytes, int]:
        """The kept bytes from ``offset`` to the end, exactly as written, and the offset they start
        at (later than ``offset`` when memory dropped those). For a reader that passes output on
        unchanged (``tether exec``): no decoding, and nothing held back."""
        start = max(offset, self._kept_start())
        if start >= self.total_bytes:
            return b"", self.total_bytes
        return bytes(self._buf[start - self._base :]), start

    def tail_text(self) -> str:
        """The retained tail as text (what a result reports)."""
        return self.read_from(0).text


class StreamCursor:
    """A consuming position over a stream: each ``take()`` returns what arrived since the last."""

    __slots__ = ("_offset", "_stream")

    def __init__(self, stream: CapturedStream) -> None:
        self._stream = stream
        self._offset = 0

    def take(self) -> StreamRead:
        read = self._stream.read_from(self._offset)
        self._offset = read.next_offset
        return read
