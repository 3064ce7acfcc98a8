"""The stdio wire on real pipes: the hand-over from the reader thread to the event loop loses and
repeats nothing, backpressure holds input in the pipe, and frames stay whole and in order whether
the sending thread or the writer thread writes them."""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import os
import select
import socket
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hang import HANG_S
from tether.mcp.wire import EOF, Item, StdioWire


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


def _request(n: int, pad: int = 0) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping", "params": {"pad": "x" * pad}}).encode()


class Pipes:
    """A stdin pipe and a stdout pipe (or socket pair, as some clients give their servers); an end
    a test closes is closed exactly once."""

    def __init__(self, stdout: str = "pipe") -> None:
        self.in_r, self.in_w = os.pipe2(os.O_CLOEXEC)
        if stdout == "socket":
            out_r, out_w = socket.socketpair()
            self.out_r, self.out_w = out_r.detach(), out_w.detach()
        else:
            self.out_r, self.out_w = os.pipe2(os.O_CLOEXEC)
        self._open = {self.in_r, self.in_w, self.out_r, self.out_w}

    def close(self, fd: int) -> None:
        self._open.remove(fd)
        os.close(fd)

    def close_all(self) -> None:
        for fd in sorted(self._open):
            self.close(fd)


@pytest.fixture
def pipes() -> Iterator[Pipes]:
    made = Pipes()
    yield made
    made.close_all()


@pytest.fixture(params=["pipe", "socket"])
def outputs(request: pytest.FixtureRequest) -> Iterator[Pipes]:
    made = Pipes(request.param)
    yield made
    made.close_all()


class Collector:
    """An ``on_item`` that keeps what it gets and tells when ``EOF`` came."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.ended = asyncio.Event()

    def __call__(self, item: Item) -> None:
        self.items.append(item)
        if item is EOF:
            self.ended.set()

    async def until_eof(self) -> list[object]:
        await asyncio.wait_for(self.ended.wait(), HANG_S)
        return _ids(self.items)


def _ids(items: list[Item]) -> list[object]:
    return [item if item is EOF else item["id"] for item in items]  # type: ignore[index]


async def test_a_line_half_read_by_the_thread_is_finished_by_the_loop(
    pipes: Pipes,
) -> None:
    in_r, in_w, out_w = pipes.in_r, pipes.in_w, pipes.out_w
    wire = StdioWire(in_r, out_w)
    early: list[Item] = []
    wire.start_reader(early.append)
    os.write(in_w, _request(1) + b"\n" + _request(2)[:20])
    _until(lambda: _unread(in_r) == 0 and len(early) == 1, "the thread has read both pieces")
    wire.stop_reader_thread()
    os.write(in_w, _request(2)[20:] + b"\n" + _request(3) + b"\n")
    late = Collector()
    wire.read_on_loop(asyncio.get_running_loop(), late)
    assert _unread(in_r) > 0  # the stopped thread read none of it
    pipes.close(in_w)
    assert await late.until_eof() == [2, 3, EOF]
    assert _ids(early) == [1]
    wire.close_writer()


async def test_end_of_input_before_the_hand_over_is_delivered_once(pipes: Pipes) -> None:
    in_r, in_w, out_w = pipes.in_r, pipes.in_w, pipes.out_w
    wire = StdioWire(in_r, out_w)
    early: list[Item] = []
    wire.start_reader(early.append)
    os.write(in_w, _request(1))  # no newline: the last line still counts
    pipes.close(in_w)
    _until(lambda: EOF in early, "the thread saw the end")
    wire.stop_reader_thread()
    late: list[Item] = []
    wire.read_on_loop(asyncio.get_running_loop(), late.append)
    await asyncio.sleep(0.05)
    assert _ids(early) == [1, EOF] and late == []
    wire.close_writer()


async def test_paused_reading_leaves_input_in_the_pipe(pipes: Pipes) -> None:
    in_r, in_w, out_w = pipes.in_r, pipes.in_w, pipes.out_w
    wire = StdioWire(in_r, out_w)
    items: list[Item] = []
    first = asyncio.Event()
    done = asyncio.Event()

    def deliver(item: Item) -> None:
        items.append(item)
        if len(items) == 1:
            wire.pause_reading()
            first.set()
        if item is EOF:
            done.set()

    wire.read_on_loop(asyncio.get_running_loop(), deliver)
    os.write(in_w, _request(1) + b"\n")
    await asyncio.wait_for(first.wait(), HANG_S)
    os.write(in_w, _request(2) + b"\n")
    await asyncio.sleep(0.1)
    assert _ids(items) == [1] and _unread(in_r) > 0 and wire.reading_paused
    wire.resume_reading()
    pipes.close(in_w)
    await asyncio.wait_for(done.wait(), HANG_S)
    assert _ids(items) == [1, 2, EOF]
    wire.close_writer()


async def test_a_regular_file_on_stdin_is_read_to_its_end(tmp_path: Path, pipes: Pipes) -> None:
    out_w = pipes.out_w
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(_request(n) + b"\n" for n in range(1, 201)))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        wire = StdioWire(fd, out_w)  # epoll cannot watch a regular file: the loop re-reads it
        got = Collector()
        wire.read_on_loop(asyncio.get_running_loop(), got)
        assert await got.until_eof() == [*range(1, 201), EOF]
        wire.close_writer()
    finally:
        os.close(fd)


def test_frames_stay_whole_and_in_order_when_the_client_reads_late(outputs: Pipes) -> None:
    in_r, out_r, out_w = outputs.in_r, outputs.out_r, outputs.out_w
    wire = StdioWire(in_r, out_w)
    # Small frames (written by the sender while the pipe has room) and frames over PIPE_BUF
    # (always the writer thread's), from two threads, while nobody reads: the pipe fills up.
    sizes = [10, 5000, 100, 3000, 70_000, 1]
    frames = {t: [_request(t * 1000 + i, sizes[i % len(sizes)]) for i in range(150)] for t in (1, 2)}

    def send(tag: int) -> None:
        for frame in frames[tag]:
            wire.send_frame(frame)

    senders = [threading.Thread(target=send, args=(tag,)) for tag in (1, 2)]
    for thread in senders:
        thread.start()
    # Until the output takes no more (how many bytes that is depends on how the kernel packed the
    # writes into its buffers): the rest waits for the writer thread.
    _until(lambda: not select.select([], [out_w], [], 0)[1], "the senders filled the output")
    assert _unread(out_r) > 0
    received = bytearray()
    deadline = time.monotonic() + HANG_S
    total = sum(len(f) + 1 for fs in frames.values() for f in fs)
    while len(received) < total:
        assert time.monotonic() < deadline, "frames were lost"
        received += os.read(out_r, 1 << 16)
    for thread in senders:
        thread.join(HANG_S)
    lines = bytes(received).split(b"\n")[:-1]
    assert len(lines) == 300
    for tag in (1, 2):
        assert [line for line in lines if json.loads(line)["id"] // 1000 == tag] == frames[tag]
    wire.close_writer()


def test_a_client_that_closed_stdout_is_heard_once(outputs: Pipes) -> None:
    in_r, out_r, out_w = outputs.in_r, outputs.out_r, outputs.out_w
    wire = StdioWire(in_r, out_w)
    heard: list[str] = []
    wire.on_broken(lambda: heard.append(threading.current_thread().name))
    outputs.close(out_r)
    wire.send_frame(_request(1))  # small: written by this thread, which hears the broken pipe
    wire.send_frame(_request(2, 70_000))  # ignored: the conversation is over
    wire.close_writer()
    assert heard == [threading.current_thread().name]
