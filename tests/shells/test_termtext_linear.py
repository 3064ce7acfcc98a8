"""The linear renderer against the old (quadratic) one: identical text on random terminal bytes.

Speed is shown by ``bench/termtext.py``; here only sameness, on inputs mixing every construct the
renderer treats specially (moves, escapes, markers, the wrapper's words, tabs, broken UTF-8).
"""

from __future__ import annotations

import random

import pytest
import termtext_reference as reference

from tether.shells import termtext
from tether.shells.termtext import render, render_text

_PIECES = (
    b"a",
    b"xyz",
    b"hello world",
    b" ",
    b"  ",
    b"\t",
    b"\r",
    b"\r",
    b"\b",
    b"\b\b",
    b"\n",
    b"\r\n",
    b"\n\r",
    b"\x1b[31m",
    b"\x1b[0m",
    b"\x1b[2K",
    b"\x1b]0;title\x07",
    b"\x1b]8;;u\x1b\\",
    b"\x1b",
    b"\x1bP1$r\x1b\\",
    b"\x1b(B",
    b"\x07",
    b"\x00",
    b"\x7f",
    b"\x0b",
    b"\xff",
    b"\xc3",
    b"\xc3\xa9",
    b"\xe2\x82",
    b"\xf0\x9f\x98\x80",
    b"\x1b]6973;abcdefghijkl;b\x1b\\",
    b"\x1b]6973;abcdefghijkl;e;0\x07",
    b"__tb abcdefgh;{ ",
    b"};__te",
    b"__te",
    b"> ",
    b"%",
    b"\x1b]6973;zz",
    b"\x1b[",
    b"e;",
    b" \t ",
)


def _random_bytes(rng: random.Random) -> bytes:
    return b"".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 120)))


@pytest.mark.parametrize("seed", range(8))
def test_random_terminal_bytes_render_as_before(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        raw = _random_bytes(rng)
        for keep in (False, True):
            assert render_text(raw, keep_trailing=keep) == reference.render_text(raw, keep_trailing=keep), raw


def test_random_raw_bytes_render_as_before() -> None:
    rng = random.Random(99)
    alphabet = b"ab \t\r\n\b\x1b[]();\x07\\\xff\xc3\xa9_"
    for _ in range(2000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert render_text(raw) == reference.render_text(raw), raw


@pytest.mark.parametrize(
    ("raw", "lines"),
    [
        (b"0%\r50%\r100%\n", ["100%"]),
        (b"abcdef\rXY\n", ["XYcdef"]),
        (b"abc\b\bZ\n", ["aZc"]),
        (b"\b\bab\rc\n", ["cb"]),
        (b"long line\rshort\r\n", ["shortline"]),
        (b"one\ntwo\rT\nthree\n", ["one", "Two", "three"]),
        (b"x" * 50 + b"\r" + b"y" * 10, ["y" * 10 + "x" * 40]),
        (b"pad   \t \nend  ", ["pad", "end"]),
    ],
)
def test_moves_and_trailing_blanks(raw: bytes, lines: list[str]) -> None:
    assert render(raw) == lines
    assert render(raw) == reference.render_text(raw).split("\n")[: len(lines)]


def test_long_runs_that_were_quadratic_render_the_same() -> None:
    # The shapes that took seconds before: a long line ahead of a `\r`, blanks before text.
    for raw in (
        b"x" * 3000 + b"\n\rz",
        b" " * 3000 + b"x",
        b"\t" * 800 + b"x\n",
        b"\r" + b"q" * 3000,
        b"x" * 3000 + b"\ra" * 1000,
    ):
        assert render_text(raw) == reference.render_text(raw)


@pytest.mark.parametrize("seed", range(4))
def test_a_big_buffer_rendered_in_pieces_renders_as_whole(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Above termtext._SLICE a buffer is cut after newlines outside escape strings; tiny slices
    # put a cut at every newline, inside OSC/DCS strings that span lines included.
    rng = random.Random(1000 + seed)
    cases = [_random_bytes(rng) for _ in range(400)]
    cases.append(b"\x1b]6973;a\nb\nc\x07d\n" + b"\x1b_x\ny\x1b\\z\n" + b"\x1b]0;t\x07\x1bPq\nr\x1b\\s\n")
    whole = [(render_text(raw), render_text(raw, keep_trailing=True)) for raw in cases]
    monkeypatch.setattr(termtext, "_SLICE", 1 + seed * 7)
    assert [len(termtext._slices(raw, osc=True)) for raw in cases[-1:]] != [1]
    for raw, (plain, kept) in zip(cases, whole, strict=True):
        assert render_text(raw) == plain, raw
        assert render_text(raw, keep_trailing=True) == kept, raw
