"""The stdio wire of ``tether mcp``: one JSON-RPC message per line, and what counts as one.

Invariants this module owns (standard library only: it runs before the SDK is imported):

- While serving, only this module touches the process's stdin and stdout. ``StdioWire.claim``
  moves them to private descriptors and points fd 0 at ``/dev/null`` and fd 1 at stderr, so a
  child process or a stray ``print`` can neither read the client's messages nor corrupt the wire.
- Every line the client sends gets exactly one outcome: a parsed message handed on, or — when it
  is not a JSON-RPC message — an error response written back naming what was wrong (with the
  request's id whenever it can be recovered, ``null`` otherwise). Nothing is dropped silently:
  invalid JSON, nesting the parser refuses, oversized lines, batches and bad envelopes are all
  answered. Malformed notifications (no id) are answered with id ``null`` as JSON-RPC allows.
- Frames are written whole and in order, so frames from the early handshake and from the SDK
  never interleave: by the thread that sends one when no frame waits before it and the descriptor
  takes it without blocking (a pipe with room for all of it, ``PIPE_BUF`` at most; a socket, sent
  to without waiting, the rest by the writer thread), otherwise by the writer thread. A client
  that stops reading stalls that thread, never the event loop.
- Input is read by a thread while the SDK loads (the early front answers from it), then by the
  event loop itself (``stop_reader_thread``, ``read_on_loop``): a line half read when the loop
  takes over is finished by the loop, and no line is read twice or lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import select
import stat
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import asyncio  # annotations only: this module runs before asyncio is imported

logger = logging.getLogger(__name__)

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
# A line longer than this is answered with INVALID_REQUEST and skipped; the largest legitimate
# message (a long paste typed into a shell) is far below it.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
_READ_CHUNK: Final = 1 << 16
_ID_SCAN_BYTES: Final = 64 * 1024


class Eof:
    """The client closed stdin (or stdout went away): the conversation is over."""

    def __repr__(self) -> str:
        return "EOF"


EOF: Final = Eof()
Message = dict[str, Any]
Item = Message | Eof


class Rejected:
    """A line that is not a usable JSON-RPC message, and the error response it gets.

    (A plain class: ``dataclasses`` costs this early path more than the whole class is worth.)
    """

    __slots__ = ("reason", "reply")

    def __init__(self, *, reply: Message, reason: str) -> None:
        self.reply = reply
        self.reason = reason


def error_response(request_id: Any, code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def is_request_id(value: Any) -> bool:
    """JSON-RPC ids MCP accepts: a string or an integer (not a bool, a float or null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _integer(digits: str) -> int:
    # Python refuses to convert an integer of more than 4,300 digits (a guard against quadratic
    # parsing) with advice for programmers (``sys.set_int_max_str_digits``); say it for a client.
    most = sys.get_int_max_str_digits()
    if most and len(digits.lstrip("-")) > most:
        raise ValueError(
            f"a number has {len(digits.lstrip('-'))} digits; numbers of at most {most} digits are read"
        )
    return int(digits)


def parse_line(line: bytes) -> Message | Rejected:
    """One line of input → a message whose envelope is valid, or the error response it gets."""
    text = line.decode("utf-8", errors="replace")
    try:
        value = json.loads(text, parse_int=_integer)
    except RecursionError:
        rid = recover_id(text)
        return _reject(
            rid,
            INVALID_REQUEST,
            "the message nests arrays/objects too deeply to parse "
            "(past 1,000 to 10,000 levels, by Python version); "
            "MCP messages and tool arguments are only a few levels deep",
        )
    except ValueError as exc:
        rid = recover_id(text)
        return _reject(rid, PARSE_ERROR, f"Parse error: the line is not valid JSON ({exc})")
    if isinstance(value, list):
        return _reject(
            None, INVALID_REQUEST, "JSON-RPC batches are not supported; send one message object per line"
        )
    if not isinstance(value, dict):
        return _reject(None, INVALID_REQUEST, f"a message must be a JSON object, got {type(value).__name__}")
    return check_envelope(value)


def check_envelope(value: Message) -> Message | Rejected:
    """The JSON-RPC 2.0 envelope MCP uses; the error names the field and what is allowed."""
    rid = value.get("id")
    reply_id = rid if is_request_id(rid) else None
    if value.get("jsonrpc") != "2.0":
        return _reject(reply_id, INVALID_REQUEST, "field 'jsonrpc' must be the string \"2.0\"")
    if "id" in value and not is_request_id(rid):
        return _reject(
            None,
            INVALID_REQUEST,
            f"field 'id' must be a string or an integer, got {_kind(rid)}",
        )
    if "method" in value:
        if not isinstance(value["method"], str) or not value["method"]:
            return _reject(reply_id, INVALID_REQUEST, "field 'method' must be a non-empty string")
        params = value.get("params")
        if "params" in value and params is not None and not isinstance(params, dict):
            return _reject(
                reply_id,
                INVALID_REQUEST,
                f"field 'params' must be an object (MCP passes parameters by name), got {_kind(params)}",
            )
        return value
    if "result" in value or "error" in value:
        if "id" not in value:
            return _reject(None, INVALID_REQUEST, "a response needs field 'id' (the request it answers)")
        if "result" in value and "error" in value:
            return _reject(reply_id, INVALID_REQUEST, "a response has 'result' or 'error', not both")
        if "result" in value and not isinstance(value["result"], dict):
            return _reject(reply_id, INVALID_REQUEST, "field 'result' must be an object")
        if "error" in value and not isinstance(value["error"], dict):
            return _reject(reply_id, INVALID_REQUEST, "field 'error' must be an object")
        return value
    return _reject(
        reply_id,
        INVALID_REQUEST,
        "a message needs field 'method' (a request or notification) or 'result'/'error' (a response)",
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _reject(request_id: Any, code: int, message: str) -> Rejected:
    return Rejected(reply=error_response(request_id, code, message), reason=message)


_ID_PATTERN = re.compile(r'"id"\s*:\s*(-?\d+(?![.\deE])|"(?:[^"\\]|\\.)*")')


def recover_id(text: str) -> Any:
    """The id of a message that cannot be parsed, if one appears at its top level; else ``None``.

    Scans only the first 64 KiB (ids come first in every client we know) and tracks nesting so an
    ``"id"`` key inside ``params`` is never mistaken for the message's.
    """
    head = text[:_ID_SCAN_BYTES]
    depth = 0
    in_string = False
    escaped = False
    start = 0
    for index, char in enumerate(head):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            if depth == 1:
                match = _ID_PATTERN.match(head, index)
                if match is not None and (index == start or head[start:index].strip() in ("", ",")):
                    with contextlib.suppress(ValueError):
                        return json.loads(match.group(1))
            in_string = True
        elif char in "{[":
            depth += 1
            start = index + 1
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            start = index + 1
    return None


class StdioWire:
    """The process's stdin/stdout, claimed: read by a thread until the event loop takes over, written
    from the caller's thread when that cannot block, else by a writer thread, always in order."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self._in_fd = in_fd
        self._out_fd = out_fd
        # Writing: frames go out in the caller's thread when nothing is queued before them and the
        # descriptor takes them whole without blocking; otherwise the writer thread writes them.
        self._lock = threading.Lock()
        self._queued = 0  # frames handed to the writer thread and not yet written
        self._write_now = _non_blocking_writer(out_fd)
        self._frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._broken = threading.Event()
        self._on_broken: Callable[[], None] | None = None
        self._writer = threading.Thread(target=self._write_frames, name="tether-mcp-writer", daemon=True)
        self._writer.start()
        # Reading: a thread until ``read_on_loop``, then the event loop.
        self._lines: _Lines | None = None
        self._reader: threading.Thread | None = None
        self._stop: tuple[int, int] | None = None  # the pipe that tells the reader thread to stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched = False  # the loop watches the descriptor (add_reader), else re-reads it
        self._paused = False

    @classmethod
    def claim(cls) -> StdioWire:
        """Take fd 0 and fd 1 for the wire; see the module docstring."""
        in_fd = _private_dup(0)
        out_fd = _private_dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        return cls(in_fd, out_fd)

    # -- writing ------------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Send one message (a dict) as one frame."""
        self.send_frame(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def send_frame(self, frame: bytes) -> None:
        """Send one already serialised message; ignored once the client stopped reading.

        Written here when no frame waits before it and the descriptor takes it without blocking
        (a thread hand-over costs more than the write); otherwise, or what a socket did not take,
        queued for the writer thread."""
        data = frame + b"\n"
        with self._lock:
            if self._broken.is_set():
                return
            if self._queued == 0 and self._write_now is not None:
                try:
                    written = self._write_now(data)
                except OSError as exc:
                    self._break(exc)
                    return
                if written == len(data):
                    return
                data = data[written:]  # the rest goes next, before anything sent after it
            self._queued += 1
        self._frames.put(data)

    def on_broken(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from whichever thread wrote) when the client's end of stdout closes."""
        self._on_broken = callback

    def close_writer(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the writer thread (bounded: a stuck client costs ``timeout``)."""
        self._frames.put(None)
        self._writer.join(timeout)

    def _write_frames(self) -> None:
        while (frame := self._frames.get()) is not None:
            try:
                _write_whole(self._out_fd, frame)
            except OSError as exc:
                with self._lock:
                    self._break(exc)
                return
            with self._lock:
                self._queued -= 1

    def _break(self, exc: OSError) -> None:
        """The client closed its end of stdout (called under the lock)."""
        if self._broken.is_set():
            return
        logger.info("stdout closed by the client (%s); the conversation ends", exc.strerror)
        self._broken.set()
        if self._on_broken is not None:
            self._on_broken()

    # -- reading ------------------------------------------------------------------------------

    def start_reader(self, on_item: Callable[[Item], None]) -> None:
        """Read lines in a daemon thread; each becomes one ``on_item`` call, then ``EOF`` once."""
        self._lines = _Lines(self, on_item)
        self._stop = os.pipe2(os.O_CLOEXEC)
        self._reader = threading.Thread(target=self._read_thread, name="tether-mcp-reader", daemon=True)
        self._reader.start()

    def stop_reader_thread(self) -> None:
        """Return once the reader thread reads no more; the rest of the input waits for
        ``read_on_loop`` (a line half read stays with the wire, not with the thread)."""
        if self._reader is None or self._stop is None:
            return
        os.write(self._stop[1], b"x")
        self._reader.join()
        self._reader = None
        for fd in self._stop:
            os.close(fd)
        self._stop = None

    def read_on_loop(self, loop: asyncio.AbstractEventLoop, on_item: Callable[[Item], None]) -> None:
        """Go on reading in ``loop`` (after ``stop_reader_thread``), lines to ``on_item``, then ``EOF``.

        A wake-up of the loop costs a fraction of a thread's hand-over to it. A descriptor epoll
        cannot watch (a regular file) is read again at every turn of the loop until its end."""
        lines = self._lines
        if lines is None:
            lines = self._lines = _Lines(self, on_item)
        elif lines.ended:
            return
        lines.on_item = on_item
        self._loop = loop
        try:
            loop.add_reader(self._in_fd, self._read_ready)
            self._watched = True
        except PermissionError:
            loop.call_soon(self._read_ready)

    def pause_reading(self) -> None:
        """Read nothing more until ``resume_reading`` (the loop's backpressure)."""
        if self._loop is None or self._paused:
            return
        self._paused = True
        if self._watched:
            self._loop.remove_reader(self._in_fd)

    def resume_reading(self) -> None:
        if self._loop is None or not self._paused:
            return
        self._paused = False
        if self._lines is None or self._lines.ended:
            return
        if self._watched:
            self._loop.add_reader(self._in_fd, self._read_ready)
        else:
            self._loop.call_soon(self._read_ready)

    def stop_reading(self) -> None:
        """The conversation is over: the loop stops reading (idempotent)."""
        self.pause_reading()
        self._loop = None

    @property
    def reading_paused(self) -> bool:
        return self._paused

    def _read_thread(self) -> None:
        assert self._lines is not None and self._stop is not None
        stop = self._stop[0]
        poller = select.poll()
        poller.register(self._in_fd, select.POLLIN)
        poller.register(stop, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if stop in ready:
                return  # the event loop reads from here on
            if not self._read_chunk(self._lines):
                return

    def _read_ready(self) -> None:
        """The loop's reader: one chunk (the descriptor is readable, so this does not block)."""
        lines = self._lines
        if lines is None or self._loop is None or self._paused:
            return
        if not self._read_chunk(lines):
            if self._watched:
                self._loop.remove_reader(self._in_fd)
            return
        if not self._watched and not self._paused:
            self._loop.call_soon(self._read_ready)

    def _read_chunk(self, lines: _Lines) -> bool:
        """Read and split one chunk; False once the input has ended (``EOF`` was delivered)."""
        try:
            chunk = os.read(self._in_fd, _READ_CHUNK)
        except InterruptedError:
            return True
        except OSError as exc:
            logger.info("stdin failed (%s); the conversation ends", exc.strerror)
            chunk = b""
        if not chunk:
            lines.finish()
            return False
        lines.feed(chunk)
        return True

    def _handle_line(self, line: bytes, on_item: Callable[[Item], None]) -> None:
        if not line.strip():
            return  # blank lines between messages carry nothing
        parsed = parse_line(line)
        if isinstance(parsed, Rejected):
            logger.info("rejected a malformed message: %s", parsed.reason)
            self.send(parsed.reply)
            return
        on_item(parsed)

    def _reject_oversized(self, head: bytes) -> None:
        rid = recover_id(head.decode("utf-8", errors="replace"))
        message = (
            f"the message is longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB; "
            "send large input in pieces (e.g. several shell_send calls)"
        )
        logger.info("rejected an oversized message (id %r)", rid)
        self.send(error_response(rid if is_request_id(rid) else None, INVALID_REQUEST, message))


class _Lines:
    """The input split into lines, whichever thread reads it: a line may span chunks, and a line
    over ``MAX_LINE_BYTES`` is answered once and skipped up to its newline."""

    __slots__ = ("_oversized_head", "_pending", "_skipping", "_wire", "ended", "on_item")

    def __init__(self, wire: StdioWire, on_item: Callable[[Item], None]) -> None:
        self._wire = wire
        self.on_item = on_item
        self.ended = False
        self._pending = bytearray()
        self._skipping = False  # inside an oversized line, discarding up to its newline
        self._oversized_head = b""

    def feed(self, chunk: bytes) -> None:
        pending = self._pending
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:newline]
            start = newline + 1
            if self._skipping:
                self._skipping = False
                self._wire._reject_oversized(self._oversized_head)
                continue
            if len(pending) + len(piece) > MAX_LINE_BYTES:
                head = bytes((pending + piece)[:_ID_SCAN_BYTES])
                pending.clear()
                self._wire._reject_oversized(head)
                continue
            pending += piece
            line = bytes(pending)
            pending.clear()
            self._wire._handle_line(line, self.on_item)
        if self._skipping:
            return
        pending += chunk[start:]
        if len(pending) > MAX_LINE_BYTES:
            self._oversized_head = bytes(pending[:_ID_SCAN_BYTES])
            pending.clear()
            self._skipping = True

    def finish(self) -> None:
        """The input ended: a last line without its newline still counts, then ``EOF``."""
        self.ended = True
        if self._pending.strip() and not self._skipping:
            self._wire._handle_line(bytes(self._pending), self.on_item)
        self._pending.clear()
        self.on_item(EOF)


def _write_whole(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _non_blocking_writer(fd: int) -> Callable[[bytes], int] | None:
    """For a pipe or a socket: a write that never blocks and says how much it wrote (0 when the
    descriptor had no room). Other descriptors (a terminal, a file) are left to the writer thread.

    A pipe that polls writable has a free buffer slot, which takes any write of up to ``PIPE_BUF``
    bytes whole; a longer frame waits for the writer thread. A socket is sent to with
    ``MSG_DONTWAIT``, through a duplicate of the descriptor (the flag is per call, so the
    descriptor itself stays blocking for the writer thread)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        poller = select.poll()
        poller.register(fd, select.POLLOUT)

        def to_pipe(data: bytes) -> int:
            if len(data) > select.PIPE_BUF or not any(ev & select.POLLOUT for _, ev in poller.poll(0)):
                return 0
            return os.write(fd, data)

        return to_pipe
    if stat.S_ISSOCK(mode):
        import socket  # only when stdout is a socket: this module runs before anything heavy

        sock = socket.socket(fileno=os.dup(fd))

        def to_socket(data: bytes) -> int:
            try:
                return sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return 0

        return to_socket
    return None


def _private_dup(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` above the standard range (children never inherit it)."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
