"""The shell's "new row unless at column 0" before each prompt, in the log's line views.

Before each prompt the shell prints its W event, a row of blanks, ``\\r`` and an erase: on the
screen the blanks wrap only when the cursor is not at column 0, so output that did not end its line
(`printf abc`) keeps its row and the prompt starts on the next one. The renderer has no width, so
it takes the whole of it as a newline where its cursor is not at column 0; the blanks and the
``\\r`` alone would let the prompt overwrite ``abc`` in ``history``, ``since`` and ``search``."""

from __future__ import annotations

from tether.shells.termtext import render, render_text

ROW = b"\x1b]6973;abcd1234;W\x07" + b" " * 80 + b"\r\x1b[K"
PROMPT = b"\x1b]6973;abcd1234;P;0;1;1.5;7\x07$ "
RESET = b"\x18\x1b\\\x1b[?7h\x1b[4l"  # what the prompt hook prints before it


def test_text_that_did_not_end_its_line_keeps_it() -> None:
    raw = b"$ printf abc\r\nabc" + RESET + ROW + PROMPT + b"\r\x1b[K" + PROMPT + b"echo hi\r\nhi\r\n"
    assert render(raw + RESET + ROW + PROMPT) == ["$ printf abc", "abc", "$ echo hi", "hi", "$"]


def test_at_column_0_it_adds_nothing() -> None:
    assert render(b"one\r\n" + RESET + ROW + PROMPT) == ["one", "$"]
    assert render(ROW + PROMPT) == ["$"]  # a read that starts there
    assert render(b"\x1b[H\x1b[J\r" + RESET + ROW + PROMPT) == ["$"]  # `clear`
    # a line ended by \r: the prompt is drawn over it, as on the screen
    assert render(b"one\r\n50%\r" + RESET + ROW + PROMPT) == ["one", "$"]


def test_one_after_another_and_at_the_end() -> None:
    assert render_text(b"a" + ROW + ROW + b"b" + ROW) == "a\nb\n"


def test_anything_else_is_dropped_as_before() -> None:
    # no W event: blanks and \r as any program prints them
    assert render(b"abcdef  \r$ x") == ["$ xdef"]
    # the W event alone (not followed by its row) is an OSC string like any other
    assert render(b"abc\x1b]6973;abcd1234;W\x07def") == ["abcdef"]
