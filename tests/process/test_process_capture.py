"""CapturedStream: bounded tail, capped spill, offsets, UTF-8 boundaries, consuming cursors."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hang import HANG_S
from tether.process.capture import CapturedStream, StreamCursor


def test_small_stream_is_kept_whole_without_a_spill_file(tmp_path: Path) -> None:
    stream = CapturedStream(max_bytes=100, max_spill_bytes=1000, spill_path=tmp_path / "s")
    stream.feed(b"hello ")
    stream.feed(b"world")
    stream.close()
    assert stream.tail_text() == "hello world"
    assert not stream.truncated
    assert stream.spill_path is None
    assert not (tmp_path / "s").exists()


def test_tail_is_bounded_and_truncation_reported(tmp_path: Path) -> None:
    stream = CapturedStream(max_bytes=10, max_spill_bytes=1000, spill_path=tmp_path / "s")
    for i in range(50):
        stream.feed(f"{i:03d}\n".encode())
    stream.close()
    assert stream.truncated
    assert stream.tail_text().endswith("049\n")
    assert len(stream.tail_text().encode()) <= 10
    # The spill holds the whole stream from byte 0.
    assert stream.spill_path == str(tmp_path / "s")
    assert Path(stream.spill_path).read_bytes() == b"".join(f"{i:03d}\n".encode() for i in range(50))


def test_spill_over_its_cap_is_deleted_and_the_path_becomes_none(tmp_path: Path) -> None:
    stream = CapturedStream(max_bytes=10, max_spill_bytes=100, spill_path=tmp_path / "s")
    stream.feed(b"x" * 60)
    assert (tmp_path / "s").exists()
    stream.feed(b"y" * 60)  # 120 > 100
    stream.close()
    assert stream.truncated
    assert stream.spill_path is None
    assert not (tmp_path / "s").exists()
    assert stream.tail_text() == "y" * 10


def test_spill_exactly_at_cap_is_kept(tmp_path: Path) -> None:
    stream = CapturedStream(max_bytes=10, max_spill_bytes=100, spill_path=tmp_path / "s")
    stream.feed(b"z" * 100)
    stream.close()
    assert stream.spill_path is not None
    assert Path(stream.spill_path).stat().st_size == 100


def test_memory_stays_bounded_under_many_small_writes() -> None:
    stream = CapturedStream(max_bytes=1000)
    for _ in range(100_000):
        stream.feed(b"abcdefghij")
    assert stream.total_bytes == 1_000_000
    assert len(stream._buf) <= 1000 + 65536 + 10
    assert len(stream.tail_text()) == 1000


def test_read_from_reports_lost_bytes_and_resumes_at_next_offset() -> None:
    stream = CapturedStream(max_bytes=8)
    stream.feed(b"0123456789abcdef")
    first = stream.read_from(0)
    assert first.lost and first.start == 8 and first.text == "89abcdef" and first.next_offset == 16
    stream.feed(b"XY")
    second = stream.read_from(first.next_offset)
    assert second.text == "XY" and not second.lost and second.next_offset == 18
    assert stream.read_from(18).text == ""


def test_reads_never_split_a_utf8_character() -> None:
    stream = CapturedStream(max_bytes=100)
    snowman = "☃".encode()  # 3 bytes
    stream.feed(b"a" + snowman[:2])
    read = stream.read_from(0)
    assert read.text == "a" and read.next_offset == 1  # the half character waits
    stream.feed(snowman[2:])
    assert stream.read_from(read.next_offset).text == "☃"
    # A tail cut that lands inside a character skips its continuation bytes.
    small = CapturedStream(max_bytes=4)
    small.feed("x☃☃".encode())  # 7 bytes; tail = last 4 = 1 continuation byte + ☃
    assert small.tail_text() == "☃"


def test_a_read_from_an_offset_inside_a_character_starts_after_it() -> None:
    # Spec 000: observed streams are read by byte offset without consuming them. An offset inside
    # a character — ``total_bytes`` saved while a writer had written half of one ("what comes
    # after now"), or any offset a caller computed — gave text starting with U+FFFD for each
    # continuation byte; text handed out never starts inside a character.
    stream = CapturedStream(max_bytes=100)
    euro = "€".encode()  # 3 bytes
    stream.feed(b"a" + euro[:2])
    saved = stream.total_bytes  # 3: inside the euro sign
    stream.feed(euro[2:] + b"b")
    read = stream.read_from(saved)
    assert (read.text, read.start, read.next_offset, read.lost) == ("b", 4, 5, False)
    assert [stream.read_from(offset).text for offset in range(6)] == ["a€b", "€b", "b", "b", "b", ""]
    # Continuation bytes with no character before them (binary output) are output, not skipped.
    binary = CapturedStream(max_bytes=100)
    binary.feed(b"\x80\x81x")
    assert binary.read_from(1).text == "\ufffdx"


def test_invalid_utf8_and_nul_are_replaced_not_raised() -> None:
    stream = CapturedStream(max_bytes=100)
    stream.feed(b"a\x00b\xff\xfe\xc3")
    stream.close()
    assert stream.tail_text() == "a\x00b\ufffd\ufffd\ufffd"


def test_cursor_consumes_and_says_lossy_when_bytes_were_dropped() -> None:
    stream = CapturedStream(max_bytes=4)
    cursor = StreamCursor(stream)
    stream.feed(b"ab")
    got = cursor.take()
    assert got.text == "ab" and not got.lost
    stream.feed(b"cdefgh")  # "ab" read; "cd" dropped before being read
    got = cursor.take()
    assert got.text == "efgh" and got.lost
    got = cursor.take()
    assert got.text == "" and not got.lost


async def test_wait_beyond_wakes_on_data_and_on_close() -> None:
    stream = CapturedStream(max_bytes=100)
    waiter = asyncio.ensure_future(stream.wait_beyond(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    stream.feed(b"x")
    await asyncio.wait_for(waiter, HANG_S)
    closing = asyncio.ensure_future(stream.wait_beyond(1))
    await asyncio.sleep(0)
    stream.close()
    await asyncio.wait_for(closing, HANG_S)
