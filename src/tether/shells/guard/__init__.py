"""tether.shells.guard — the dangerous-command guard: judges a line an agent wrote before a shell runs it.

Invariant: ``Guard.check`` judges every simple command the text would run (inside substitutions,
lists, function bodies, code run from strings, behind wrappers, with the variables, functions and
aliases the shell reported: ``ShellState``) against every enabled rule, in order, and never
raises: text it cannot read is refused; text that is only incomplete is allowed for now
(``Verdict.incomplete``) and judged whole once complete. A verdict depends on the text, the state
and the guard's fixed rules alone: no I/O, paths judged on their text. The guard is a speed bump
against an agent's mistakes, not a security boundary (code an interpreter or a script runs goes
through unjudged); the boundary is the confined executor (``tether.shell.sandbox``). Each module
states the part it owns (``guard``: the verdict; ``walk``: the events; ``words``: bash words;
``shellstate``: the shell's report; ``config``: ``[guard]``); the rules are the sub-package
``rules``, with its own face.

The face::

    Guard, Verdict                    ``Guard.from_config(config)``, ``Guard.default()``;
                                      ``check(text, state)`` → ``Verdict``
    BYPASS_HOW                        how a person's explicit request still gets a blocked command run
    parse_section                     ``[guard]`` of ``config.toml``, validated whole (``UsageError``)
    ShellState, parse_dump, dump_key  what the shell reported it defines; its dump, read; the dump's key
    decode_ansi_c                     the escapes of ``$'…'``, decoded as bash does
"""

from tether.shells.guard.config import parse_section
from tether.shells.guard.guard import BYPASS_HOW, Guard, Verdict
from tether.shells.guard.shellstate import ShellState, dump_key, parse_dump
from tether.shells.guard.words import decode_ansi_c

__all__ = [
    "BYPASS_HOW",
    "Guard",
    "ShellState",
    "Verdict",
    "decode_ansi_c",
    "dump_key",
    "parse_dump",
    "parse_section",
]
