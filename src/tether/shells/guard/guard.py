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

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from tether.config import Config
from tether.errors import UsageError
from tether.shells.guard.config import GuardSettings, parse_section
from tether.shells.guard.defaults import DEFAULT_RULES
from tether.shells.guard.events import Event, Invocation
from tether.shells.guard.rule import Rule, RuleEnv
from tether.shells.guard.walk import events
from tether.shells.guard.words import text_of

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

    __slots__ = ("_env", "_rules", "_verdicts")

    def __init__(self, rules: Iterable[Rule] = DEFAULT_RULES, *, protect: Iterable[str] = ()) -> None:
        self._rules = tuple(rules)
        self._env = RuleEnv(protect=tuple(protect))
        self._verdicts: dict[str, Verdict] = {}

    @classmethod
    def default(cls) -> Guard:
        """The default rules, nothing disabled or added (shared instance)."""
        return _default_guard()

    @classmethod
    def from_settings(cls, settings: GuardSettings) -> Guard:
        kept = (rule for rule in DEFAULT_RULES if rule.id not in settings.disabled)
        return cls((*kept, *settings.rules), protect=settings.protect)

    @classmethod
    def from_config(cls, config: Config) -> Guard:
        """Defaults adjusted by ``[guard]`` in ``config.toml``; a bad section is a ``UsageError``."""
        raw = config.raw.get("guard", {})
        if not isinstance(raw, dict):
            raise UsageError('config.toml: guard must be a table ([guard]), e.g. [guard] disable = ["mkfs"]')
        return cls.from_settings(parse_section(config.section("guard")))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    def check(self, command: str) -> Verdict:
        """Judge one command line (``shell_run`` command, or ``shell_send`` text to a shell)."""
        if not command.strip():
            return ALLOWED
        if len(command) > _MAX_CACHED_CHARS:
            return self._judge(command)
        verdict = self._verdicts.get(command)
        if verdict is None:
            verdict = self._judge(command)
            if len(self._verdicts) >= _CACHE_SIZE:
                # Oldest first (insertion order); another thread sharing the guard may have evicted it.
                self._verdicts.pop(next(iter(self._verdicts), ""), None)
            self._verdicts[command] = verdict
        return verdict

    def _judge(self, command: str) -> Verdict:
        try:
            for count, event in enumerate(events(command)):
                if count >= MAX_EVENTS:
                    return self._too_big(command, "the command runs too many commands for the guard to read")
                for rule in self._rules:
                    why = rule.judge(event, self._env)
                    if why is not None:
                        return _blocked(rule, event, why)
        except RecursionError:
            return self._too_big(command, "the command is nested too deeply for the guard to read")
        return ALLOWED

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
    return Verdict(
        allowed=False, rule=rule.id, command=_shorten(text), why=why, how=f"{rule.advice} {BYPASS_HOW}"
    )


def _shorten(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


@cache
def _default_guard() -> Guard:
    return Guard()
