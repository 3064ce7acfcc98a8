"""``shell_run`` kind=steps: 1–50 steps of ``{ label?, send?, expect?, timeoutMs? }`` (spec 003).

Invariant: every ``Step`` sends a single line (Enter is pressed after it), expects one of the four
kinds a step may wait for — idle, match, file, bell; exit/noproc/cpu need kind=run with a wait —
and has at least one of the two. ``expect`` is an object ``{ kind, pattern?, path? }``; the bare
string ``"idle"`` or ``"bell"`` is accepted as shorthand for ``{ kind }``.
"""

from __future__ import annotations

from tether.errors import UsageError
from tether.tools.shells.args.fields import Fields, describe
from tether.tools.shells.args.model import Step, StepExpect, StepsAction
from tether.tools.shells.args.regex import compile_js_regex

MAX_STEPS = 50
STEP_FIELDS = ("label", "send", "expect", "timeoutMs")
EXPECT_KINDS = ("idle", "match", "file", "bell")
_EXPECT_FIELDS = {
    "idle": ("kind",),
    "bell": ("kind",),
    "match": ("kind", "pattern"),
    "file": ("kind", "path"),
}


def parse_steps(f: Fields) -> StepsAction:
    raw = f.get("steps")
    if raw is None:
        raise f.missing("steps", "an array of 1-50 { label?, send?, expect?, timeoutMs? }")
    if not isinstance(raw, list):
        raise f.fail("steps", f"must be an array of 1-50 steps; got {describe(raw)}")
    if not 1 <= len(raw) <= MAX_STEPS:
        raise f.fail("steps", f"must hold 1 to {MAX_STEPS} steps; got {len(raw)}")
    return StepsAction(steps=tuple(_step(item, f"{f.at('steps')}[{i}]") for i, item in enumerate(raw)))


def _step(raw: object, path: str) -> Step:
    f = Fields(raw, path)
    f.only(STEP_FIELDS)
    send = f.string("send", what="one line of text")
    if send is not None and ("\n" in send or "\r" in send):
        raise f.fail("send", "must be one line (Enter is pressed after it); split it into several steps")
    step = Step(
        label=f.string("label", max_len=64, non_blank=True),
        send=send,
        expect=_expect(f),
        timeout_ms=f.budget("timeoutMs", lo=0, hi=86_400_000, default=None, unit="ms"),
    )
    if step.send is None and step.expect is None:
        raise UsageError(f"{path}: a step needs send, expect, or both")
    return step


def _expect(step: Fields) -> StepExpect | None:
    raw = step.get("expect")
    path = step.at("expect")
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"kind": raw}
    f = Fields(raw, path)
    kind = f.get("kind")
    if kind is None:
        raise f.missing("kind", "one of idle, match, file, bell")
    if kind not in EXPECT_KINDS:
        raise f.fail(
            "kind",
            f"a step can expect idle, match, file or bell; got {describe(kind)} "
            "(for exit, noproc or cpu use kind=run with a wait)",
        )
    kind = str(kind)
    f.only(_EXPECT_FIELDS[kind], context=f"for expect kind={kind}")
    if kind == "match":
        pattern = f.required_string("pattern", non_blank=False, what="a JavaScript regular expression")
        if not pattern:
            raise f.fail("pattern", "must not be empty (it would match at once)")
        return StepExpect(
            kind="match", pattern=pattern, regex=compile_js_regex(pattern, field=f.at("pattern"))
        )
    if kind == "file":
        return StepExpect(kind="file", path=f.required_string("path", what="a file path (~ allowed)"))
    return StepExpect(kind="idle" if kind == "idle" else "bell")
