"""Output shaping and result rendering of the persistent-shell tools."""

from __future__ import annotations

import re

import pytest

from tether.shells.shaping import (
    MAX_LINES,
    UNCHANGED,
    SearchPage,
    cap_since,
    cap_tail,
    diff_screens,
    render_search,
    search_lines,
    shape,
    summarize,
    trim_screen,
)
from tether.tools.shells.render import (
    RESULT_SCHEMA,
    TaskOutcome,
    block_header,
    outcome_json,
    render_result,
    summary_header,
)

NUMBERED = [f"line {i}" for i in range(1, 3001)]


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, []), (-1, []), (1, ["line 3000"]), (3, ["line 2998", "line 2999", "line 3000"]), (5000, NUMBERED)],
)
def test_cap_tail(n: int, expected: list[str]) -> None:
    assert cap_tail(NUMBERED, n) == expected


def test_cap_since_keeps_everything_that_fits() -> None:
    assert cap_since(NUMBERED[:MAX_LINES]) == NUMBERED[:MAX_LINES]
    assert cap_since([]) == []


def test_cap_since_drops_and_says_so() -> None:
    out = cap_since(NUMBERED)
    assert out[0] == "[1000 earlier lines dropped]"
    assert out[1:] == NUMBERED[1000:] and len(out) == MAX_LINES + 1
    assert cap_since(["a", "b", "c"], 2) == ["[1 earlier lines dropped]", "b", "c"]


def test_trim_screen_drops_padding_rows() -> None:
    assert trim_screen(["$ ls   ", "a", "", "   ", ""]) == ["$ ls", "a"]
    assert trim_screen(["", ""]) == []


def test_diff_screens() -> None:
    before = ["$ make", "building", "", ""]
    after = ["$ make", "building", "done", "$ "]
    assert diff_screens(before, after) == ["@@ -1,2 +1,4 @@", " $ make", " building", "+done", "+$"]
    assert diff_screens(after, after) == ["(no change)"]
    assert diff_screens(None, ["x"]) == ["@@ -0,0 +1 @@", "+x"]
    assert diff_screens(["a", "b"], ["a", "c"]) == ["@@ -1,2 +1,2 @@", " a", "-b", "+c"]


def test_summarize() -> None:
    assert summarize(NUMBERED, 20) == [*NUMBERED[-5:], "[3000 lines total]"]
    assert summarize(NUMBERED, 2) == [*NUMBERED[-2:], "[3000 lines total]"]
    assert summarize([], 20) == ["[0 lines total]"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("tail", NUMBERED[-20:]),
        ("since", ["[1000 earlier lines dropped]", *NUMBERED[1000:]]),
        ("history", ["[1000 earlier lines dropped]", *NUMBERED[1000:]]),
        ("summary", [*NUMBERED[-5:], "[3000 lines total]"]),
    ],
)
def test_shape_buffer_modes(mode: str, expected: list[str]) -> None:
    assert shape(mode, NUMBERED, limit=20) == expected  # type: ignore[arg-type]


def test_shape_screen_and_diff() -> None:
    assert shape("screen", ["a ", "", ""], limit=20) == ["a"]
    assert shape("diff", ["a", "b"], limit=20, previous=["a"]) == ["@@ -1 +1,2 @@", " a", "+b"]


BUFFER = ["start", "error: one", "ok", "ok", "error: two", "end", "error: three"]


def test_search_counts_all_and_pages() -> None:
    regex = re.compile("error")
    page = search_lines(BUFFER, regex, context=0, offset=0, limit=2)
    assert (page.total, page.offset, page.next_offset) == (3, 0, 2)
    assert [h.line for h in page.hits] == [2, 5]
    assert render_search(page) == [
        "3 matches, 2 on this page, from 0; next: matchOffset=2",
        "2: error: one",
        "5: error: two",
    ]
    last = search_lines(BUFFER, regex, context=0, offset=2, limit=2)
    assert render_search(last) == ["3 matches, 1 on this page, from 2; no more", "7: error: three"]


def test_search_context_lines_and_separators() -> None:
    page = search_lines(BUFFER, re.compile("two|one"), context=1, offset=0, limit=20)
    assert render_search(page) == [
        "2 matches, 2 on this page, from 0; no more",
        "1- start",
        "2: error: one",
        "3- ok",
        "4- ok",
        "5: error: two",
        "6- end",
    ]


def test_search_merges_overlapping_windows_like_grep() -> None:
    lines = [f"line {i}" for i in range(1, 21)]
    lines[4], lines[5], lines[8], lines[15] = "hit 5", "hit 6", "hit 9", "hit 16"
    page = search_lines(lines, re.compile("hit"), context=2, offset=0, limit=20)
    assert render_search(page) == [
        "4 matches, 4 on this page, from 0; no more",
        "3- line 3",
        "4- line 4",
        "5: hit 5",
        "6: hit 6",
        "7- line 7",
        "8- line 8",
        "9: hit 9",
        "10- line 10",
        "11- line 11",
        "--",
        "14- line 14",
        "15- line 15",
        "16: hit 16",
        "17- line 17",
        "18- line 18",
    ]
    # Paging stays by hits: a page of two ends at hit 6, whose context still shows (line 7, 8);
    # the next page starts at hit 9 and its context may repeat lines the previous page showed.
    first = search_lines(lines, re.compile("hit"), context=2, offset=0, limit=2)
    assert render_search(first)[0] == "4 matches, 2 on this page, from 0; next: matchOffset=2"
    assert render_search(first)[-1] == "8- line 8"
    second = search_lines(lines, re.compile("hit"), context=2, offset=2, limit=2)
    assert render_search(second)[:3] == [
        "4 matches, 2 on this page, from 2; no more",
        "7- line 7",
        "8- line 8",
    ]


def test_search_edges() -> None:
    none = search_lines(BUFFER, re.compile("zzz"), context=8, offset=0, limit=20)
    assert render_search(none) == ["0 matches, 0 on this page, from 0; no more"]
    beyond = search_lines(BUFFER, re.compile("ok"), context=0, offset=10, limit=20)
    assert beyond.hits == () and beyond.total == 2 and beyond.next_offset is None
    edge = search_lines(BUFFER, re.compile("start|three"), context=8, offset=0, limit=20)
    assert edge.hits[0].before == () and edge.hits[-1].after == ()
    assert SearchPage(total=5, offset=0, hits=()).next_offset == 0


def ok_run() -> TaskOutcome:
    return TaskOutcome(
        index=0,
        shell="dsh-ab12cd",
        label="build",
        run_id="ab12cd34",
        exit_code=0,
        waited="exit",
        met=True,
        elapsed_ms=132,
        lines=("compiled", "done"),
    )


def timed_out() -> TaskOutcome:
    return TaskOutcome(
        index=1, shell="dsh-cd34ef", waited="idle", met=False, elapsed_ms=30_000, lines=("...",)
    )


def failed() -> TaskOutcome:
    return TaskOutcome(
        index=2,
        shell="dsh-ef56gh",
        error="the shell is locked by a person",
        error_code="REFUSED",
        refused=True,
    )


def test_summary_header() -> None:
    assert summary_header([ok_run(), timed_out(), failed()]) == "3 tasks: 2 ok, 1 error"
    assert summary_header([ok_run()]) == "1 task: 1 ok"
    assert summary_header([failed(), failed()]) == "2 tasks: 0 ok, 2 errors"


def test_block_header() -> None:
    assert (
        block_header(ok_run())
        == "## dsh-ab12cd · build · ok · run=ab12cd34 · exit=0 · wait exit: met · 132 ms"
    )
    assert block_header(timed_out()) == "## dsh-cd34ef · ok · wait idle: timeout · 30.0 s"
    assert block_header(TaskOutcome(index=4)) == "## task 4 · ok"


def test_structured_result() -> None:
    text = render_result([ok_run(), timed_out(), failed()], notes=["concurrency 12 clamped to 8"])
    assert text.splitlines() == [
        "3 tasks: 2 ok, 1 error",
        "[concurrency 12 clamped to 8]",
        "## dsh-ab12cd · build · ok · run=ab12cd34 · exit=0 · wait exit: met · 132 ms",
        "compiled",
        "done",
        "## dsh-cd34ef · ok · wait idle: timeout · 30.0 s",
        "...",
        "## dsh-ef56gh · error",
        "error: REFUSED: the shell is locked by a person",
    ]


def test_plain_result() -> None:
    nonzero = TaskOutcome(index=3, shell="dsh-zz", exit_code=2, lines=("oops",))
    text = render_result([ok_run(), timed_out(), failed(), nonzero], structured=False)
    assert text.splitlines() == [
        "compiled",
        "done",
        "...",
        "[dsh-cd34ef timed out waiting for idle]",
        "[dsh-ef56gh error: REFUSED: the shell is locked by a person]",
        "oops",
        "[dsh-zz exit=2]",
    ]
    assert render_result([ok_run()], structured=False) == "compiled\ndone"


def test_outcome_json_matches_schema_fields() -> None:
    data = outcome_json([ok_run(), failed()])
    assert (data["ok"], data["failed"]) == (1, 1)
    first = data["tasks"][0]
    assert first["runId"] == "ab12cd34" and first["exitCode"] == 0 and first["met"] is True
    assert first["lines"] == ["compiled", "done"] and data["tasks"][1]["errorCode"] == "REFUSED"
    item = RESULT_SCHEMA["properties"]["tasks"]["items"]
    assert set(first) == set(item["properties"]) and set(item["required"]) <= set(first)


def test_unchanged_marker() -> None:
    assert UNCHANGED == "unchanged"
