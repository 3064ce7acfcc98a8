"""The sync mark ``ShellHost.sync_log`` prints is no event of the shell and no output of the pane."""

from __future__ import annotations

from tether.shells.integration.events import EventScanner, only_sync_marks, sync_mark
from tether.shells.termtext import render_text


def test_marks_alone_are_not_output_anything_else_is() -> None:
    a, b = sync_mark(), sync_mark()
    assert a != b
    assert only_sync_marks(a) and only_sync_marks(a + b)
    assert not only_sync_marks(a + b"done\r\n" + b)
    assert not only_sync_marks(a[:-1])  # a mark cut by a read: not proven to be one
    # An event of the shell next to a mark is the shell's output.
    assert not only_sync_marks(a + b"\x1b]6973;abcd1234;P;0;3;1.5\x07")


def test_a_mark_is_no_shell_event_and_no_visible_text() -> None:
    mark = sync_mark()
    assert EventScanner("abcd1234", 0).feed(b"x" + mark + b"y") == []
    assert EventScanner("sync", 0).feed(mark) == []  # even to a scanner whose nonce were "sync"
    assert render_text(b"before" + mark + b"after") == "beforeafter"
