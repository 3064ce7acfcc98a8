"""tether.shells.guard.rules — what the guard blocks: the rule type, the default rules and their judges.

Invariant: a rule's judge answers *why* an event is dangerous, or ``None``; it never raises, does
no I/O and judges paths on their text alone (the guard never looks at the disk). Every default
rule has a stable id (``config.toml`` disables rules by id) and advice naming a safer way; their
order is the order they are tried. Each module states the part it owns (``rule``: the type and
``CommandMatch``; ``defaults``: the default set; ``files``: files and disks; ``system``:
processes, the machine, remote history and unread code; ``paths``: which paths are protected).

The face::

    Rule, RuleEnv                  a named rule and what its judge may consult besides the event
    CommandMatch                   command-name and argument globs (every ``[[guard.rules]]`` entry)
    DEFAULT_RULES, DEFAULT_IDS     the default rule set, in order, and its ids
"""

from tether.shells.guard.rules.defaults import DEFAULT_IDS, DEFAULT_RULES
from tether.shells.guard.rules.rule import CommandMatch, Rule, RuleEnv

__all__ = ["DEFAULT_IDS", "DEFAULT_RULES", "CommandMatch", "Rule", "RuleEnv"]
