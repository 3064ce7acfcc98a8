"""Unit tests of one layer: terminal text rendering and the log's hole-punched cap."""

from __future__ import annotations

import os
from pathlib import Path

from tether.shells.logs import data_start, enforce_cap, read_range
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
