"""Unit tests of one layer: terminal text rendering and the log's hole-punched cap."""

from __future__ import annotations

import os
from pathlib import Path

from tether.shells.logs import data_start, enforce_cap, read_range
from tether.shells.termtext import filter_screen, has_bell, render
from tether.shells.wrapper import unwrappable_reason, wrap_lines


def test_render_removes_markers_echo_and_escapes() -> None:
    lines = wrap_lines("echo hi # note", "abcdefghijkl")
    echo = ("root@h:~# " + lines[0] + "\r\n\x1b[?2004l\r\x1b[?2004h> " + lines[1] + "\r\n").encode()
    raw = (
        echo
        + b"\x1b]6973;abcdefghijkl;b\x1b\\\x1b[31mhi\x1b[0m\r\n\x1b]6973;abcdefghijkl;e;0\x1b\\prog 10%\rprog 99%\r\n"  # noqa: E501
    )
    assert render(raw) == ["root@h:~# echo hi # note", "hi", "prog 99%"]
    assert filter_screen(["$  __tb abcdefghijkl;{ ls", "> };__te", "out", "", ""]) == ["$ ls", "out"]


def test_bell_is_not_an_osc_terminator() -> None:
    assert not has_bell(b"\x1b]0;title\x07text")
    assert has_bell(b"text\x07")


def test_unwrappable_commands() -> None:
    assert unwrappable_reason("   ") == "the command is empty"
    assert unwrappable_reason("echo a \\") is not None
    assert unwrappable_reason("echo ok") is None


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
