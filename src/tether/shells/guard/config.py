"""The ``[guard]`` section of ``config.toml``: switch default rules off, protect more, add rules.

Invariant: the section is validated whole before a ``Guard`` exists, and every mistake is a
``UsageError`` naming the key, what is allowed and an example. An unknown key or rule id is an
error, never ignored, so a typo can neither silently switch a rule off nor leave one out::

    [guard]
    disable = ["git-force-push"]      # ids of default rules to switch off
    protect = ["/data", "~/photos"]   # more directories treated like system directories
    ask = true                        # a blocked agent command is put to a person (approvals)

    [[guard.rules]]
    id = "terraform-destroy"          # lowercase letters, digits and '-'; unique
    command = "terraform"             # a name or a list of names; globs allowed ("mkfs*")
    args_any = ["destroy"]            # optional: some argument matches one of these globs
    args_all = ["-auto-approve"]      # optional: each of these globs matches some argument
    why = "destroys managed infrastructure"
    advice = "run terraform plan -destroy and show the user the plan"   # optional
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import UsageError
from tether.shells.guard.rules import DEFAULT_IDS, CommandMatch, Rule

_SECTION_KEYS = ("disable", "protect", "rules", "ask")
_RULE_KEYS = ("id", "command", "args_any", "args_all", "why", "advice")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_EXAMPLE = (
    '[[guard.rules]]\nid = "terraform-destroy"\ncommand = "terraform"\nargs_any = ["destroy"]\n'
    'why = "destroys managed infrastructure"'
)
DEFAULT_ADVICE = "Ask the user to run it themselves, or find a narrower command that does the job."


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardSettings:
    disabled: frozenset[str] = frozenset()
    protect: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    ask: bool = False  # put a blocked agent command to a person instead of refusing it outright


def parse_section(table: Mapping[str, Any]) -> GuardSettings:
    """Validate ``[guard]`` (as ``Config.section("guard")`` returns it)."""
    for key in table:
        if key not in _SECTION_KEYS:
            raise UsageError(
                f"config.toml: unknown setting [guard].{key}; allowed: {', '.join(_SECTION_KEYS)}"
            )
    disabled = _strings(table, "disable", "[guard].disable")
    for rule_id in disabled:
        if rule_id not in DEFAULT_IDS:
            raise UsageError(
                f"config.toml: [guard].disable names unknown rule {rule_id!r}; "
                f"default rules: {', '.join(sorted(DEFAULT_IDS))}"
            )
    protect = _strings(table, "protect", "[guard].protect")
    for path in protect:
        if not path.startswith(("/", "~")):
            raise UsageError(
                f"config.toml: [guard].protect entry {path!r} must be an absolute path or start with ~ "
                '(e.g. protect = ["/data", "~/photos"])'
            )
    raw_rules = table.get("rules", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        raise UsageError(f"config.toml: [guard].rules must be an array of tables, e.g.\n{_EXAMPLE}")
    rules: list[Rule] = []
    seen: set[str] = set()
    for position, raw in enumerate(raw_rules, start=1):
        rule = _rule(raw, position)
        if rule.id in DEFAULT_IDS or rule.id in seen:
            what = "a default rule" if rule.id in DEFAULT_IDS else "an earlier [[guard.rules]] entry"
            raise UsageError(
                f"config.toml: [[guard.rules]] #{position} id {rule.id!r} is already used by {what}; "
                "choose another id (to replace a default rule, disable it and add yours)"
            )
        seen.add(rule.id)
        rules.append(rule)
    ask = table.get("ask", False)
    if not isinstance(ask, bool):
        raise UsageError(
            "config.toml: [guard].ask must be true or false (ask a person to let a blocked command through)"
        )
    return GuardSettings(disabled=frozenset(disabled), protect=tuple(protect), rules=tuple(rules), ask=ask)


def _rule(raw: Mapping[str, Any], position: int) -> Rule:
    where = f"[[guard.rules]] #{position}"
    for key in raw:
        if key not in _RULE_KEYS:
            raise UsageError(
                f"config.toml: unknown setting {key!r} in {where}; allowed: {', '.join(_RULE_KEYS)}"
            )
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not _ID.match(rule_id):
        raise UsageError(
            f"config.toml: {where} needs an id of lowercase letters, digits and '-' "
            f"(got {rule_id!r}), e.g.\n{_EXAMPLE}"
        )
    where = f"[[guard.rules]] {rule_id!r}"
    command = raw.get("command")
    commands = [command] if isinstance(command, str) else command
    if (
        not isinstance(commands, list)
        or not commands
        or not all(isinstance(c, str) and c.strip() and "/" not in c for c in commands)
    ):
        raise UsageError(
            f"config.toml: {where}.command must be a command name or a non-empty list of names "
            '(globs allowed, no directory: "terraform", ["mkfs*", "wipefs"])'
        )
    why = raw.get("why")
    if not isinstance(why, str) or not why.strip():
        raise UsageError(
            f"config.toml: {where}.why must be a non-empty string saying what the command destroys"
        )
    advice = raw.get("advice", DEFAULT_ADVICE)
    if not isinstance(advice, str) or not advice.strip():
        raise UsageError(f"config.toml: {where}.advice must be a non-empty string (or left out)")
    match = CommandMatch(
        commands=tuple(commands),
        args_any=tuple(_strings(raw, "args_any", f"{where}.args_any")),
        args_all=tuple(_strings(raw, "args_all", f"{where}.args_all")),
        why=why.strip(),
    )
    summary = f"{', '.join(commands)}" + (f" with {' / '.join(match.args_any)}" if match.args_any else "")
    return Rule(id=rule_id, summary=summary, advice=advice.strip(), judge=match, builtin=False)


def _strings(table: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise UsageError(f'config.toml: {where} must be a list of non-empty strings, e.g. {key} = ["..."]')
    return [v.strip() for v in value]
