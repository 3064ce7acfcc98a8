"""The dangerous-command guard: parse a command line, judge every simple command, give a verdict.

Invariant: ``Guard.check`` tries every enabled rule, in order, on every event ``guard_walk``
yields (each simple command, each wrapper layer, each redirect, function and unreadable part),
stops at the first rule that fires, and never raises for any input text — text it cannot read is
itself a verdict. The guard is a speed bump against an agent's mistakes, not a security boundary:
it refuses what it cannot read, and a person who asked for a command can still have it run with
``safety.bypassGuard=true`` plus a ``safety.reason``. The boundary is the confined executor.

    guard = Guard.from_config(load_config())     # defaults + [guard] of config.toml
    verdict = guard.check("sudo rm -rf /")
    verdict.allowed, verdict.rule, verdict.message
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

from tether.config import Config
from tether.errors import UsageError
from tether.shells.guard.complete import completion
from tether.shells.guard.config import GuardSettings, parse_section
from tether.shells.guard.events import DynamicName, Event, Hidden, Invocation, Problem
from tether.shells.guard.heredocs import Lexed, lex, prepared
from tether.shells.guard.history import designator
from tether.shells.guard.rules import DEFAULT_RULES, Rule, RuleEnv
from tether.shells.guard.shellstate import ShellState
from tether.shells.guard.walk import events
from tether.shells.guard.walkstate import WalkState
from tether.shells.guard.words import parse, text_of

BYPASS_HOW = (
    "If the user explicitly asked for exactly this, rerun with safety.bypassGuard=true and a "
    "non-empty safety.reason quoting that request."
)
_MAX_SHOWN = 300
# Events one check may judge before it gives up and refuses: bounds the work of adversarial
# text (code nested in code with many `find -exec` roots) at a few tens of milliseconds.
MAX_EVENTS = 5_000
# Verdicts kept per guard: a verdict is a pure function of the text and the guard's fixed rules, and
# an agent repeats its commands (fan-out calls type one line into many shells), so parsing it again
# is wasted work. Only texts up to _MAX_CACHED_CHARS are kept, bounding the memory at a few MiB.
_CACHE_SIZE = 512
_MAX_CACHED_CHARS = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The guard's answer. When blocked: which rule, the offending command, why, how to proceed."""

    allowed: bool
    rule: str = ""
    command: str = ""
    why: str = ""
    how: str = ""
    # Allowed for now: the text is an incomplete command (bash would wait for more), judged whole
    # once complete; ``why`` says what is still open.
    incomplete: bool = False
    # Blocked only because these shell functions' bodies were not reported: ask the shell, judge again.
    needs: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The text a tool returns to the model when the command is blocked."""
        if self.allowed:
            return "allowed by the dangerous-command guard"
        return (
            f"Blocked by the dangerous-command guard (rule {self.rule}): {self.why}.\n"
            f"Command: {self.command}\n"
            f"How to proceed: {self.how}"
        )


ALLOWED = Verdict(allowed=True)


class Guard:
    """Judges command lines against a fixed rule list; cheap to build, safe to share."""

    __slots__ = ("_env", "_implicit", "_known", "_rules", "_verdicts")

    def __init__(
        self, rules: Iterable[Rule] = DEFAULT_RULES, *, protect: Iterable[str] = (), home: str = ""
    ) -> None:
        """``home`` is tether's own state directory (``TETHER_HOME``): its tmux socket and the
        directory itself are protected, and ``$TETHER_HOME`` reads as it. A command may name them
        through the home's symbolic links or past them: both spellings are protected."""
        self._rules = tuple(rules)
        homes = tuple(dict.fromkeys((home, os.path.realpath(home)))) if home else ()
        self._env = RuleEnv(
            protect=(*protect, *(form for spelling in homes for form in _home_forms(spelling))),
            tether_sockets=tuple(posixpath.join(spelling, "tmux.sock") for spelling in homes),
        )
        self._known = {"TETHER_HOME": home} if home else {}
        self._verdicts: dict[tuple[str, str], Verdict] = {}
        # The verdict on a shell's own hooks, per state, for lines that change nothing they read.
        self._implicit: dict[str, Verdict | None] = {}

    @classmethod
    def default(cls) -> Guard:
        """The default rules, nothing disabled or added, for the default ``TETHER_HOME`` (``~/.tether``)
        (shared instance)."""
        return _default_guard()

    @classmethod
    def from_settings(cls, settings: GuardSettings, *, home: str = "") -> Guard:
        kept = (rule for rule in DEFAULT_RULES if rule.id not in settings.disabled)
        return cls((*kept, *settings.rules), protect=settings.protect, home=home)

    @classmethod
    def from_config(cls, config: Config) -> Guard:
        """Defaults adjusted by ``[guard]`` in ``config.toml``; a bad section is a ``UsageError``."""
        raw = config.raw.get("guard", {})
        if not isinstance(raw, dict):
            raise UsageError('config.toml: guard must be a table ([guard]), e.g. [guard] disable = ["mkfs"]')
        return cls.from_settings(parse_section(config.section("guard")), home=str(config.home))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    def check(self, command: str, state: ShellState | None = None) -> Verdict:
        """Judge one command line (``shell_run`` command, or a line a shell is about to run).

        ``state`` is what the shell reported it has defined (variables, functions, aliases,
        prompt hooks and traps): with it the text is judged as the shell will run it, and so is the
        code the shell runs on its own after it. Without it, what earlier calls defined is unknown."""
        if not command.strip():
            return ALLOWED
        key = (command, state.key if state is not None else "")
        if len(command) > _MAX_CACHED_CHARS:
            return self._judge(command, state)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._judge(command, state)
            if len(self._verdicts) >= _CACHE_SIZE:
                # Oldest first (insertion order); another thread sharing the guard may have evicted it.
                self._verdicts.pop(next(iter(self._verdicts), ("", "")), None)
            self._verdicts[key] = verdict
        return verdict

    def _judge(self, command: str, state: ShellState | None) -> Verdict:
        try:
            if state is None or state.histexpand:
                expansion = designator(
                    command, (state.variables.get("histchars") if state else None) or "!^#"
                )
                if expansion is not None:
                    hidden = Hidden(
                        why=f"history expansion ({expansion}) replaces it with text from the shell's "
                        "history, which the guard does not see; write the command out in full",
                        text=command,
                    )
                    return self._first(iter((hidden,))) or ALLOWED
            tree = parse(prepared(command))
            lexed: Lexed | None = None
            suffix: str | None = None
            if tree.root_node.has_error:
                lexed = lex(command)
                suffix = completion(command, lexed, tree)
            walk = WalkState.of(state, self._known)
            before = walk.fingerprint() if state is not None else 0
            if lexed is not None and suffix is not None:
                walked = events(lexed.text + suffix, state=walk)
            else:
                walked = events(command, state=walk, tree=tree)
            verdict = self._first(walked)
            if verdict is None and state is not None:
                verdict = self._hooks(state, walk, unchanged=walk.fingerprint() == before)
            if verdict is not None:
                return verdict
            if lexed is not None and suffix is not None:
                return Verdict(allowed=True, incomplete=True, why=_still_open(lexed))
        except RecursionError:
            return self._too_big(command, "the command is nested too deeply for the guard to read")
        return ALLOWED

    def _first(self, found: Iterator[Event], *, lenient: bool = False, where: str = "") -> Verdict | None:
        for count, event in enumerate(found):
            if count >= MAX_EVENTS:
                return self._too_big(event.text, "the command runs too many commands for the guard to read")
            if lenient and isinstance(event, DynamicName | Hidden | Problem):
                continue
            for rule in self._rules:
                why = rule.judge(event, self._env)
                if why is not None:
                    return _blocked(rule, event, f"{why}{where}")
        return None

    def _hooks(self, state: ShellState, walk: WalkState, *, unchanged: bool) -> Verdict | None:
        if not unchanged:
            return self._implicit_verdict(state, walk)
        if state.key not in self._implicit:
            if len(self._implicit) >= 64:
                self._implicit.pop(next(iter(self._implicit), ""), None)
            self._implicit[state.key] = self._implicit_verdict(state, walk)
        return self._implicit.get(state.key)

    def _implicit_verdict(self, state: ShellState, walk: WalkState) -> Verdict | None:
        """Code the shell runs on its own (prompt hooks, prompt strings, traps), with the values
        the command leaves behind. It is the user's own set-up, so only what is known counts:
        what it computes at run time (``eval "$(direnv export bash)"``) is not refused."""
        for what, code in state.implicit_code():
            where = f" (in {what}, which the shell runs on its own after the command)"
            verdict = self._first(events(code, depth=1, state=walk), lenient=True, where=where)
            if verdict is not None:
                return verdict
        return None

    def _too_big(self, command: str, why: str) -> Verdict:
        rule = next((r for r in self._rules if r.id == "unparseable"), None)
        if rule is None:
            return ALLOWED
        return Verdict(
            allowed=False, rule=rule.id, command=_shorten(command), why=why, how=f"{rule.advice} {BYPASS_HOW}"
        )


def _blocked(rule: Rule, event: Event, why: str) -> Verdict:
    text = event.text
    if isinstance(event, Invocation) and event.feeders:
        # Show the pipeline that feeds the command: `curl … | sh`, `echo / | xargs rm -rf`.
        text = " | ".join((*(text_of(feeder.node) for feeder in event.feeders), text))
    needs = event.needs if isinstance(event, Hidden) else ()
    return Verdict(
        allowed=False,
        rule=rule.id,
        command=_shorten(text),
        why=why,
        how=f"{rule.advice} {BYPASS_HOW}",
        needs=needs,
    )


def _home_forms(home: str) -> tuple[str, ...]:
    """TETHER_HOME as a protected directory, also as ``~/…`` when it lies in the user's home."""
    if not home:
        return ()
    user = os.path.expanduser("~").rstrip("/")
    if user and home.startswith(user + "/"):
        return (home, "~" + home[len(user) :])
    return (home,)


def _still_open(lexed: Lexed) -> str:
    if lexed.terminators:
        doc = next(d for d in lexed.heredocs if d.end is None)
        return f"the here-document <<{doc.delimiter} is still open (no line {doc.delimiter!r} yet)"
    if lexed.closers:
        what = {"'": "a quote", '"': "a quote", ")": "a ( or $(", "`": "a backtick", "}": "a ${"}
        return f"{what.get(lexed.closers[0], 'a line continuation')} is still open"
    return "a compound command (if, for, while, case, { or a function) or a pipeline is still open"


def _shorten(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


@cache
def _default_guard() -> Guard:
    return Guard(home=os.path.expanduser("~/.tether"))
