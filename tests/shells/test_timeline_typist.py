"""The rule that names a typed command's typist (``timeline._typist``): the last Enter noted between
the prompt the line was typed at and the command's start, else nobody. The whole path — a panel
terminal's Enter noted, the timeline read from a real shell — is in ``tests/panel/test_people.py``."""

from __future__ import annotations

from tether.shells.timeline import _typist

ENTERS = [(100, "panel:alice"), (250, "panel:bob"), (250, "panel"), (900, "panel:alice")]


def test_the_last_enter_between_the_prompt_and_the_start_names_the_typist() -> None:
    assert _typist(ENTERS, 200, 300) == "panel"  # bob and the serve token at one offset: the later
    assert _typist(ENTERS, 100, 120) == "panel:alice"  # an Enter at the prompt's very start
    assert _typist(ENTERS, 260, 900) == "panel:alice"  # one at the command's very start


def test_an_enter_before_the_prompt_or_none_at_all_names_nobody() -> None:
    assert _typist(ENTERS, 300, 800) is None  # the last Enter came before this prompt
    assert _typist([], 0, 800) is None
    assert _typist(ENTERS, None, 300) is None  # the prompt is not in the log (its head was cut)
    assert _typist(ENTERS, 0, 50) is None  # every Enter came after the command started
