"""A run's end from the shell's own events: at its prompt, or (a wait for its exit) at its line's end."""

from __future__ import annotations

from tether.shells.integration.events import EventScanner
from tether.shells.integration.tracker import RunTrack

NONCE = "n0nce1"


def ev(payload: str) -> bytes:
    return f"\x1b]6973;{NONCE};{payload}\x07".encode()


def _track(data: bytes, *, at_exit: bool) -> RunTrack:
    track = RunTrack(token=42, prompt_before=3, at_exit=at_exit)
    track.feed(EventScanner(NONCE, 0).feed(data))
    return track


def test_the_line_end_carries_its_status_or_none_and_its_time() -> None:
    with_status, without, bare = EventScanner(NONCE, 0).feed(ev("E;7;12.5") + ev("E;;13,25") + ev("E"))
    assert (with_status.kind, with_status.status, with_status.at) == ("E", 7, 12.5)
    assert (without.kind, without.status, without.at) == ("E", None, 13.25)  # a locale's comma
    assert (bare.status, bare.at) == (None, None)


def test_a_wait_for_the_exit_ends_at_the_line_end_a_prompt_wait_at_the_prompt() -> None:
    data = ev("C;42;1.0") + b"out\r\n" + ev("E;5") + b"hook output" + ev("P;5;4;2.0")
    early, late = _track(data, at_exit=True), _track(data, at_exit=False)
    assert (early.verdict, early.status, early.ended and early.ended.kind) == ("ended", 5, "E")
    assert (late.verdict, late.status, late.ended and late.ended.kind) == ("ended", 5, "P")
    assert early.ended is not None and late.ended is not None and early.ended.start < late.ended.start


def test_a_line_end_without_its_status_leaves_the_end_to_the_prompt() -> None:
    track = _track(ev("C;42;1.0") + ev("E;;1.5") + ev("P;0;4;2.0"), at_exit=True)
    assert (track.verdict, track.status, track.ended and track.ended.kind) == ("ended", 0, "P")


def test_a_line_end_before_the_runs_own_start_is_not_its_end() -> None:
    # The previous command's hooks, then this run's line: only events after its C count.
    track = _track(ev("E;9") + ev("C;42;1.0") + ev("E;0"), at_exit=True)
    assert (track.verdict, track.status) == ("ended", 0)
    assert _track(ev("C;41;1.0") + ev("E;1"), at_exit=True).verdict == "pending"


def test_events_printed_again_are_dropped() -> None:
    """A ``cat`` of the shell's own log prints its old events, nonce and all; their numbers are
    not above the last event read, so neither a replayed prompt nor a replayed status ends the run."""
    old = (
        ev("P;0;2;1.0;7") + ev("C;9;1.1;8") + ev("E;0;1.2;9") + ev("H;10;  4  echo old") + ev("P;0;3;1.3;11")
    )
    data = ev("P;0;3;1.3;11") + ev("C;42;2.0;12") + old + b"out\r\n" + ev("E;3;3.0;13") + ev("P;3;4;3.1;14")
    events = EventScanner(NONCE, 0).feed(data)
    assert [(e.kind, e.number) for e in events] == [("P", 11), ("C", 12), ("E", 13), ("P", 14)]
    track = _track(data, at_exit=True)
    assert (track.verdict, track.status) == ("ended", 3)
    # A scanner told the number reached before its start drops a replay that comes first.
    assert EventScanner(NONCE, 0, after=12).feed(old) == []
    # A history number of six digits is no event number.
    (h,) = EventScanner(NONCE, 0).feed(ev("H;123456  ls"))
    assert (h.number, h.text) == (None, "ls")


def test_a_shell_that_does_not_number_its_events_is_read_as_before() -> None:
    data = ev("P;0;3;1.0") + ev("C;42;2.0") + ev("E;3;3.0") + ev("Q") + ev("X;3")
    assert [(e.kind, e.number) for e in EventScanner(NONCE, 0).feed(data)] == [
        ("P", None),
        ("C", None),
        ("E", None),
        ("Q", None),
        ("X", None),
    ]
