"""JS-dialect regexes on Python ``re``: translations, refusals, and a differential check against node."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from hang import HANG_S
from tether.errors import UsageError
from tether.tools.shells.args.regex import compile_js_regex, js_regex_to_python

TRANSLATIONS = [
    (r"(?<year>\d{4})-\k<year>", r"(?P<year>[0-9]{4})-(?P=year)"),
    (r"\d+\D\w\W", r"[0-9]+[^0-9][A-Za-z0-9_][^A-Za-z0-9_]"),
    (r"[\d\w.]", r"[0-9A-Za-z0-9_.]"),
    (r"a.b", "a[^\\n\\r\\u2028\\u2029]b"),
    (r"[^]", r"[\s\S]"),
    (r"a[]b", r"a(?!)b"),
    (r"\cC", r"\x03"),
    (r"a{,5}", r"a\{,5}"),
    (r"a{2,}?", r"a{2,}?"),
    (r"x*?y+?z??", r"x*?y+?z??"),
    (r"\a\Z\A", "aZA"),
    (r"\/usr\/bin", "/usr/bin"),
    (r"[[]", r"[\[]"),
    (r"(?:a)(?=b)(?!c)(?<=d)(?<!e)", r"(?:a)(?=b)(?!c)(?<=d)(?<!e)"),
    (r"\x41\u0042", r"\x41\u0042"),
    (r"[\b]", r"[\x08]"),
    (r"\bword\b", r"\bword\b"),
    (r"^\$ $", r"^\$ \Z"),
    (r"(a)\1", r"(a)\1"),
]


@pytest.mark.parametrize(("js", "python"), TRANSLATIONS)
def test_translation(js: str, python: str) -> None:
    assert js_regex_to_python(js) == python
    re.compile(python)


REFUSED = [
    ("a*+", "possessive"),
    ("a{2}+", "possessive"),
    ("(?i)abc", "not JavaScript syntax"),
    ("(?P<n>a)", "not JavaScript syntax"),
    ("(?#comment)", "not JavaScript syntax"),
    ("(?>atomic)", "not JavaScript syntax"),
    (r"\u{1F600}", "u flag"),
    ("abc\\", "lone backslash"),
    ("[abc", "unterminated"),
    ("(abc", "missing )"),
    ("a**", "multiple repeat"),
    ("(?<=a+)b", "look-behind requires fixed-width"),
    (r"\k<nope>", "unknown group name"),
]


@pytest.mark.parametrize(("pattern", "reason"), REFUSED)
def test_refused_with_field_and_reason(pattern: str, reason: str) -> None:
    with pytest.raises(UsageError) as info:
        compile_js_regex(pattern, field="tasks[3].wait.pattern")
    message = str(info.value)
    assert message.startswith("tasks[3].wait.pattern: invalid regular expression")
    assert reason in message


# Pattern, subjects: each pair is matched in node and in Python; the first match must be identical.
DIFFERENTIAL = [
    (r"\d+", ["abc 123", "٣٤", "none"]),
    (r"\w+", ["héllo", "__x1", "ü"]),
    (r"a.c", ["abc", "a\nc", "a\rc", "a\u2028c", "a\u00e9c"]),
    (r"[^]+", ["line1\nline2"]),
    (r"x[]y", ["xy", "x]y"]),
    (r"(?<n>\d)-\k<n>", ["1-2 3-3"]),
    (r"\cJ", ["a\nb"]),
    (r"a{,2}", ["a{,2}", "aa"]),
    (r"\a\Z", ["aZ", "\x07"]),
    (r"done$", ["done", "done\n", "undone"]),
    (r"^\$ ", ["$ ls", " $ "]),
    (r"[\b]", ["a\bb"]),
    (r"\bend\b", ["the end.", "endless"]),
    (r"(?<=\$ )\w+", ["$ make"]),
    (r"\s+", ["a \u00a0\t b"]),
    (r"\x41\u00e9", ["Aé"]),
    (r"error|failed", ["build failed", "no errors", "ok"]),
    (r"[\d-]+", ["tel 12-34"]),
    (r"\/tmp\/\w+", ["ls /tmp/abc"]),
    (r"(a+)+b", ["aaab"]),
]


def test_matches_like_javascript() -> None:
    node = shutil.which("node")
    assert node is not None, "node is required (make installs it: the panel's assets need npm)"
    cases = [(pattern, subject) for pattern, subjects in DIFFERENTIAL for subject in subjects]
    script = (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(cases.map(([p, s]) => { const m = new RegExp(p).exec(s);"
        " return m === null ? null : [m.index, m[0]]; })));"
    )
    done = subprocess.run(
        [node, "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=True,
    )
    expected = json.loads(done.stdout)
    for (pattern, subject), js in zip(cases, expected, strict=True):
        m = compile_js_regex(pattern, field="pattern").search(subject)
        got = None if m is None else [m.start(), m.group(0)]
        assert got == js, f"{pattern!r} on {subject!r}: python {got}, javascript {js}"
