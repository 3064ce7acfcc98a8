"""A tab in a command's output lines up where the terminal puts it: the next multiple of 8 columns.

It was four blanks wherever it stood, so `printf 'a\tb\nabcdefg\tx\n'` read as ``a    b`` and
``abcdefg    x`` while the screen shows ``a       b`` and ``abcdefg x``: columns printed with tabs
(TSV, `ls -l | column`, compiler notes) no longer lined up in a run's output."""

from __future__ import annotations

from tether.shells.termtext import render, render_text


def test_tabs_stop_every_eight_columns() -> None:
    assert render(b"a\tb\r\nabcdefg\tx\r\n12345678\ty\r\n\tz\r\n") == [
        "a       b",
        "abcdefg x",
        "12345678        y",
        "        z",
    ]


def test_wide_and_combining_characters_count_as_the_terminal_counts_them() -> None:
    assert render_text("你好\tx\ne\u0301\tx\n😀\tx\n".encode()) == "你好    x\ne\u0301       x\n😀      x\n"


def test_a_progress_line_then_a_tab() -> None:
    assert render_text(b"50%\r100%\tdone\n") == "100%    done\n"
