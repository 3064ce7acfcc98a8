"""Unit tests of one layer: terminal text rendering and the log's hole-punched cap."""

from __future__ import annotations

import os
from pathlib import Path

from pytest import MonkeyPatch

from tether.shells import logs as logs_module
from tether.shells.logs import data_start, enforce_cap, read_range
from tether.shells.reading import log_lines, safe_end, settled_lines
from tether.shells.termtext import filter_screen, has_bell, render


def test_render_removes_events_and_escapes() -> None:
    n = "abcdefghijkl"
    raw = (
        f"\x1b]6973;{n};P;0;3\x07root@h:~# echo hi # note\r\n\x1b]6973;{n};C;99\x07".encode()
        + b"\x1b[31mhi\x1b[0m\r\nprog 10%\rprog 99%\r\n"
        + f"\x1b]6973;{n};H;  12  echo hi\n  two lines\x07\x1b]6973;{n};P;0;4\x07root@h:~# ".encode()
    )
    assert render(raw) == ["root@h:~# echo hi # note", "hi", "prog 99%", "root@h:~#"]
    assert filter_screen(["$ ls", "out\x07", "", ""]) == ["$ ls", "out"]


def test_bell_is_not_an_osc_terminator() -> None:
    assert not has_bell(b"\x1b]0;title\x07text")
    assert has_bell(b"text\x07")


def test_cap_punches_the_oldest_bytes_and_keeps_offsets(tmp_path: Path) -> None:
    log = tmp_path / "dsh-aaaaaa.log"
    block = b"".join(f"{i:07d}\n".encode() for i in range(200_000))  # 1.6 MB
    log.write_bytes(block)
    assert enforce_cap(log, 256 * 1024)
    first = data_start(log)
    assert first > 0 and first % 4096 == 0
    assert log.stat().st_size == len(block)  # offsets unchanged
    assert os.stat(log).st_blocks * 512 <= 300 * 1024  # disk use bounded
    assert read_range(log, len(block) - 8) == b"0199999\n"
    assert read_range(log, 0, 8) == b""  # punched bytes are not returned


def _log(tmp_path: Path, data: bytes) -> Path:
    log = tmp_path / "shell.log"
    log.write_bytes(data)
    return log


def test_a_runs_lines_from_one_read_are_those_of_the_two_reads(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    # ``settled_lines`` renders a range near the log's end from the bytes ``safe_end`` reads; it must
    # give what ``safe_end`` then ``log_lines`` (two more reads) give, wherever the range lies.
    event = b"\x1b]6973;1;E;0;1.5;7\x07"
    unfinished = b"\x1b]6973;1;E;0;1."  # an event still being printed at the view's end
    body = b"".join(b"line %d \x1b[1mbold\x1b[0m\r\n" % n for n in range(4000))  # ~100 KB
    cases = {
        "plain": body,
        "events": body + event + b"after\r\n",
        "unfinished": body + b"tail line\r\n" + unfinished,
        "no newline": body + b"partial",
    }
    for name, data in cases.items():
        log = _log(tmp_path, data)
        size = len(data)
        for start in (
            0,
            size - 70_000,
            size - 65_536,
            size - 65_535,
            size - 5_000,
            size - 10,
            size,
            size + 5,
        ):
            for limit, max_bytes in ((2000, None), (3, None), (2000, 300)):
                stop = safe_end(log, size)
                expected = (stop, log_lines(log, start, stop, limit, max_bytes=max_bytes))
                assert settled_lines(log, start, size, limit, max_bytes=max_bytes) == expected, (name, start)
        assert settled_lines(log, size - 5_000, size, 2000)[0] == (
            size - len(unfinished) if name == "unfinished" else size
        )
    assert settled_lines(tmp_path / "gone.log", 0, 0, 10) == (0, log_lines(tmp_path / "gone.log", 0, 0, 10))

    opened: list[int] = []
    real_open = logs_module._open

    def counting(path: Path, flags: int) -> int | None:
        opened.append(flags)
        return real_open(path, flags)

    monkeypatch.setattr(logs_module, "_open", counting)
    settled_lines(_log(tmp_path, body), len(body) - 5_000, len(body), 2000)
    assert len(opened) == 1


def test_an_event_begun_after_a_punched_head_ends_the_view_where_it_begins(tmp_path: Path) -> None:
    # The log's head punched (its cap) up to within the stretch ``safe_end`` reads: the event's
    # offset counts from where the bytes read begin, not from where the stretch would have begun.
    unfinished = b"\x1b]6973;1;E;0;1."
    data = b"".join(b"old line %d\r\n" % n for n in range(9000)) + b"last line\r\n" + unfinished
    log = _log(tmp_path, data)
    assert enforce_cap(log, 48 * 1024)
    first = data_start(log)
    assert len(data) - 65_536 < first < len(data) - 8_192
    event_at = len(data) - len(unfinished)
    assert safe_end(log, len(data)) == event_at
    stop, lines = settled_lines(log, first, len(data), 2000)
    assert stop == event_at and lines.lines[-1] == "last line"
    assert (stop, lines) == (event_at, log_lines(log, first, event_at, 2000))
