"""What an argv really runs: wrapper commands peeled off, interpreters and their code found.

Invariant: every command that runs another command from its arguments (``sudo``, ``env``,
``xargs``, ``timeout``, ``nice``, ``command``, ``exec``, ``busybox``, …) is listed here with the
options that take a value, so the wrapped command is found the way the wrapper itself would find
it; a wrapper that runs a *string* as shell code (``su -c``, ``env -S``, ``watch``, ``ssh``)
hands that string back to be parsed again. Names are compared after the directory is stripped,
so ``/usr/bin/sudo`` is ``sudo``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tether.shells.guard.words import Word


@dataclass(frozen=True, slots=True, kw_only=True)
class OptSpec:
    """How a command's options read: which take a value, which end option parsing."""

    with_arg: str = ""  # short options whose value is glued on or is the next word
    glued_optional: str = ""  # short options whose optional value can only be glued on (-i{})
    long_with_arg: frozenset[str] = frozenset()
    plus_options: bool = False  # bash's +o / +O


def command_name(word: Word) -> str:
    return posixpath.basename(word.value.rstrip("/")) if word.value.strip("/") else word.value


def first_operand(args: Sequence[Word], spec: OptSpec) -> int:
    """Index of the first non-option word (``len(args)`` when there is none)."""
    index = 0
    while index < len(args):
        arg = args[index].value
        if arg == "--":
            return index + 1
        if arg.startswith("--") and len(arg) > 2:
            name = arg[2:].split("=", 1)[0]
            index += 2 if "=" not in arg and name in spec.long_with_arg else 1
            continue
        if (arg.startswith("-") or (spec.plus_options and arg.startswith("+"))) and len(arg) > 1:
            index += 1 + _short_cluster_takes_next(arg[1:], spec)
            continue
        return index
    return index


def _short_cluster_takes_next(cluster: str, spec: OptSpec) -> int:
    for position, letter in enumerate(cluster):
        if letter in spec.glued_optional:
            return 0
        if letter in spec.with_arg:
            return 1 if position == len(cluster) - 1 else 0
    return 0


def option_values(
    args: Sequence[Word], short: str, long: Sequence[str], spec: OptSpec, *, permute: bool = False
) -> list[Word]:
    """Values given to one option (``-c X``, ``-cX``, ``--command=X``, ``--command X``).

    ``permute`` reads options after operands too, as GNU getopt does (``su user -c CMD``).
    """
    found: list[Word] = []
    stop = len(args) if permute else first_operand(args, spec)
    index = 0
    while index < stop:
        arg = args[index].value
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in long:
                if eq:
                    found.append(_tail(args[index], len(arg) - len(value)))
                elif index + 1 < len(args):
                    found.append(args[index + 1])
            index += 2 if not eq and name in spec.long_with_arg else 1
            continue
        if not arg.startswith("-") or len(arg) < 2:
            index += 1
            continue
        cluster = arg[1:]
        taken = _short_cluster_takes_next(cluster, spec)
        if short and short in cluster:
            glued = cluster[cluster.index(short) + 1 :]
            if glued and short in spec.with_arg:
                found.append(_tail(args[index], len(arg) - len(glued)))
            elif index + 1 < len(args):
                found.append(args[index + 1])
        index += 1 + taken
    return found


def _tail(word: Word, offset: int) -> Word:
    # A glued value (-cCODE, --command=CODE) keeps the word's dynamic flag and node.
    return Word(value=word.value[offset:], code=word.code[offset:], dynamic=word.dynamic, node=word.node)


def has_flag(args: Sequence[Word], spec: OptSpec, *, short: str = "", long: Sequence[str] = ()) -> bool:
    stop = first_operand(args, spec)
    for arg in (a.value for a in args[:stop]):
        if arg.startswith("--"):
            if arg[2:].split("=", 1)[0] in long:
                return True
        elif (
            short and arg.startswith("-") and any(letter in short for letter in _flag_letters(arg[1:], spec))
        ):
            return True
    return False


def _flag_letters(cluster: str, spec: OptSpec) -> str:
    """The option letters of a cluster; a value glued after ``-u`` (``-uvera``) is not letters."""
    for position, letter in enumerate(cluster):
        if letter in spec.with_arg or letter in spec.glued_optional:
            return cluster[: position + 1]
    return cluster


# ---------------------------------------------------------------------------------------------
# Wrappers


@dataclass(frozen=True, slots=True, kw_only=True)
class Unwrapped:
    """What a wrapper runs: another argv, or a string of shell code (``code``)."""

    argv: tuple[Word, ...] = ()
    code: Word | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Wrapper:
    spec: OptSpec = OptSpec()
    skip_operands: int = 0  # timeout DURATION, chroot NEWROOT, taskset MASK, ssh HOST
    no_exec_flags: str = ""  # options that make it not run a command at all (command -v)
    code_short: str = ""  # option whose value is shell code (su -c, flock -c, env -S)
    code_long: tuple[str, ...] = ()
    code_only: bool = False  # without its code option it starts an interactive shell (su)
    joins_rest: bool = False  # the remaining words are joined into shell code (watch, ssh)


_W = _Wrapper
WRAPPERS: dict[str, _Wrapper] = {
    "sudo": _W(
        spec=OptSpec(
            with_arg="ughpCDrtTUR",
            long_with_arg=frozenset(
                {"user", "group", "host", "prompt", "close-from", "chdir", "role", "type"}
                | {"command-timeout", "other-user", "chroot"}
            ),
        ),
        no_exec_flags="elv",
    ),
    "doas": _W(spec=OptSpec(with_arg="uC")),
    "pkexec": _W(spec=OptSpec(long_with_arg=frozenset({"user"}))),
    "env": _W(
        spec=OptSpec(with_arg="uCSP", long_with_arg=frozenset({"unset", "chdir", "split-string"})),
        code_short="S",
        code_long=("split-string",),
    ),
    "nice": _W(spec=OptSpec(with_arg="n", long_with_arg=frozenset({"adjustment"}))),
    "nohup": _W(),
    "setsid": _W(),
    "time": _W(spec=OptSpec(with_arg="fo", long_with_arg=frozenset({"format", "output"}))),
    "timeout": _W(
        spec=OptSpec(with_arg="sk", long_with_arg=frozenset({"signal", "kill-after"})), skip_operands=1
    ),
    "stdbuf": _W(spec=OptSpec(with_arg="ioe", long_with_arg=frozenset({"input", "output", "error"}))),
    "ionice": _W(
        spec=OptSpec(with_arg="cnpPu", long_with_arg=frozenset({"class", "classdata"})), no_exec_flags="pPu"
    ),
    "chrt": _W(spec=OptSpec(with_arg="TPD"), skip_operands=1, no_exec_flags="p"),
    "taskset": _W(spec=OptSpec(), skip_operands=1, no_exec_flags="p"),
    "chroot": _W(spec=OptSpec(long_with_arg=frozenset({"userspec", "groups"})), skip_operands=1),
    "command": _W(no_exec_flags="vV"),
    "builtin": _W(),
    "exec": _W(spec=OptSpec(with_arg="a")),
    "coproc": _W(),
    "busybox": _W(),
    "toybox": _W(),
    "xargs": _W(
        spec=OptSpec(
            with_arg="adEILnPs",
            glued_optional="eil",
            long_with_arg=frozenset({"arg-file", "delimiter", "max-args", "max-procs", "max-chars"})
            | {"process-slot-var"},
        )
    ),
    "su": _W(
        spec=OptSpec(with_arg="cgGsw", long_with_arg=frozenset({"command", "group", "shell"})),
        code_short="c",
        code_long=("command",),
        code_only=True,
    ),
    "runuser": _W(
        spec=OptSpec(with_arg="cgGsuw", long_with_arg=frozenset({"command", "group", "shell", "user"})),
        code_short="c",
        code_long=("command",),
        code_only=True,
    ),
    "flock": _W(
        spec=OptSpec(with_arg="wEc", long_with_arg=frozenset({"timeout", "conflict-exit-code", "command"})),
        code_short="c",
        code_long=("command",),
        skip_operands=1,
    ),
    "script": _W(
        spec=OptSpec(with_arg="cEIOBTm", long_with_arg=frozenset({"command", "log-io", "log-out"})),
        code_short="c",
        code_long=("command",),
        code_only=True,
    ),
    "watch": _W(spec=OptSpec(with_arg="nq", long_with_arg=frozenset({"interval"})), joins_rest=True),
    "ssh": _W(spec=OptSpec(with_arg="BbcDEeFIiJLlmOoPpQRSWw"), skip_operands=1, joins_rest=True),
    "strace": _W(spec=OptSpec(with_arg="abeEIoOpPsSuUX"), no_exec_flags="p"),
    "ltrace": _W(spec=OptSpec(with_arg="aAeFlLnopsuwxX"), no_exec_flags="p"),
    "unbuffer": _W(),
}


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def unwrap(argv: Sequence[Word], feed: Sequence[Word] = ()) -> Unwrapped | None:
    """Peel one wrapper off ``argv``; ``None`` when argv[0] is not a wrapper or runs nothing.

    ``feed`` is what a preceding pipeline stage is known to print; ``xargs`` appends it.
    """
    name = command_name(argv[0])
    wrapper = WRAPPERS.get(name)
    if wrapper is None:
        return None
    args = argv[1:]
    if wrapper.code_short or wrapper.code_long:
        # su, runuser, script and flock read options anywhere (GNU getopt); env stops at the
        # first operand, and only env appends its operands to the split string.
        permute = name != "env"
        codes = option_values(args, wrapper.code_short, wrapper.code_long, wrapper.spec, permute=permute)
        if codes:
            extra = args[first_operand(args, wrapper.spec) :] if name == "env" else ()
            return Unwrapped(code=join_code(codes[-1:], extra))
        if wrapper.code_only:
            return None
    if wrapper.no_exec_flags and has_flag(args, wrapper.spec, short=wrapper.no_exec_flags):
        return None
    start = first_operand(args, wrapper.spec)
    if name == "env":
        while start < len(args) and (args[start].value == "-" or _ASSIGNMENT.match(args[start].value)):
            start += 1
    start += wrapper.skip_operands
    rest = tuple(args[start:])
    if not rest:
        return None
    if wrapper.joins_rest and not (
        name == "watch" and has_flag(args, wrapper.spec, short="x", long=("exec",))
    ):
        return Unwrapped(code=join_code(rest, ()))
    if name == "xargs":
        return Unwrapped(argv=(*rest, *feed))
    return Unwrapped(argv=rest)


def join_code(words: Sequence[Word], extra: Sequence[Word]) -> Word:
    """Words joined with spaces into shell code, as ``eval`` and ``ssh`` do."""
    parts = [*words, *extra]
    return Word(
        value=" ".join(w.value for w in parts),
        code=" ".join(w.code for w in parts),
        dynamic=any(w.dynamic for w in parts),
        node=parts[0].node if len(parts) == 1 else None,
    )


# ---------------------------------------------------------------------------------------------
# Interpreters: where their code comes from


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeSource:
    """Where an interpreter reads its program: inline words, a script operand, or stdin."""

    inline: tuple[Word, ...] = ()
    script: Word | None = None
    stdin: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class _Interp:
    spec: OptSpec
    code_opts: str = ""  # short options whose value is the program (-c, -e)
    code_long: tuple[str, ...] = ()
    module_opts: str = ""  # options that run a named module instead (python -m)
    stdin_flags: str = ""  # options that force reading the program from stdin (bash -s)


_SHELL = _Interp(
    spec=OptSpec(with_arg="oO", long_with_arg=frozenset({"rcfile", "init-file"}), plus_options=True),
    code_opts="c",
    stdin_flags="s",
)
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "fish", "csh", "tcsh"})
_INTERPRETERS: tuple[tuple[re.Pattern[str], _Interp], ...] = (
    (
        re.compile(r"^(python|pypy)[0-9.]*$"),
        _Interp(spec=OptSpec(with_arg="WXcm"), code_opts="c", module_opts="m"),
    ),
    (re.compile(r"^perl[0-9.]*$"), _Interp(spec=OptSpec(with_arg="eEIMmx"), code_opts="eE")),
    (re.compile(r"^ruby[0-9.]*$"), _Interp(spec=OptSpec(with_arg="eIrCE"), code_opts="e")),
    (
        re.compile(r"^(node|nodejs|bun|deno)$"),
        _Interp(
            spec=OptSpec(with_arg="eprC", long_with_arg=frozenset({"eval", "print", "require", "import"})),
            code_opts="ep",
            code_long=("eval", "print"),
        ),
    ),
    (re.compile(r"^php[0-9.]*$"), _Interp(spec=OptSpec(with_arg="rfdcz"), code_opts="r")),
    (re.compile(r"^(lua[0-9.]*|luajit)$"), _Interp(spec=OptSpec(with_arg="el"), code_opts="e")),
)


def interpreter(name: str) -> _Interp | None:
    if name in SHELLS:
        return _SHELL
    for pattern, interp in _INTERPRETERS:
        if pattern.match(name):
            return interp
    return None


def code_source(name: str, args: Sequence[Word]) -> CodeSource | None:
    """Where ``name args`` takes its program from; ``None`` when ``name`` is no interpreter."""
    interp = interpreter(name)
    if interp is None:
        return None
    inline = tuple(option_values(args, "", interp.code_long, interp.spec))
    for letter in interp.code_opts:
        inline += tuple(option_values(args, letter, (), interp.spec))
    start = first_operand(args, interp.spec)
    if interp is _SHELL and inline:
        # bash -c: the first operand is the program, not -c's neighbour.
        code = args[start] if start < len(args) else None
        return CodeSource(inline=(code,) if code is not None else ())
    if inline:
        return CodeSource(inline=inline)
    if interp.module_opts and has_flag(args, interp.spec, short=interp.module_opts):
        return CodeSource()
    if interp.stdin_flags and has_flag(args, interp.spec, short=interp.stdin_flags):
        return CodeSource(stdin=True)
    if start >= len(args):
        return CodeSource(stdin=True)
    script = args[start]
    if script.value in ("-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"):
        return CodeSource(stdin=True)
    return CodeSource(script=script)


# ---------------------------------------------------------------------------------------------
# find


_FIND_EXPRESSION_START = frozenset({"(", ")", "!", ","})


def find_parts(args: Sequence[Word]) -> tuple[tuple[Word, ...], tuple[Word, ...]]:
    """``find``'s starting points (``.`` when none are given) and its expression words."""
    index = 0
    while index < len(args) and args[index].value.startswith("-") and len(args[index].value) > 1:
        value = args[index].value
        if value == "--":
            index += 1
            break
        if value[1] not in "HLPDO":
            break  # the expression has begun (-name, -delete, …)
        index += 2 if value in ("-D", "-O") else 1
    start = index
    while index < len(args):
        value = args[index].value
        if (value.startswith("-") and len(value) > 1) or value in _FIND_EXPRESSION_START:
            break
        index += 1
    roots = tuple(args[start:index]) or (Word.literal("."),)
    return roots, tuple(args[index:])
