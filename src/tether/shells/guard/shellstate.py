"""What a shell has defined, as the shell itself reported it: the guard's view of earlier calls.

Invariant: ``parse_dump`` reads exactly what the shell integration writes (``declare -p``,
``declare -F``, then ``alias -p``, ``trap -p`` and ``declare -f`` of some functions, between
marker lines) and nothing else; a dump that does not end with its end marker (the shell was still
writing it) is not a state at all (``None``), never a partial one. Variables come from bash's own
quoting (one line each, ``$'…'`` for control characters), so a value is read byte for byte; the
code sections (aliases, traps, function bodies) are parsed as bash, so a marker inside a quoted
alias cannot end a section early.

``ShellState.key`` identifies the state for caching verdicts; it leaves out what changes at every
prompt without meaning anything to the guard (``$_``, ``LINENO``, ``RANDOM``, tether's own names).
``dump_key`` does the same for the dump itself, so a state is parsed once and serves every prompt
until the user defines something.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from tree_sitter import Node

from tether.shells.guard.heredocs import lex
from tether.shells.guard.words import decode_ansi_c, parse, resolve, text_of

STATE_MARK = "#tether-state"
NAMES_MARK = "#tether-names"
CODE_MARK = "#tether-code"
END_MARK = "#tether-end"

_VOLATILE = frozenset(
    {"_", "BASH_COMMAND", "BASH_LINENO", "BASH_SOURCE", "FUNCNAME", "LINENO", "RANDOM", "SRANDOM"}
    | {"SECONDS", "EPOCHREALTIME", "EPOCHSECONDS", "HISTCMD", "PIPESTATUS", "BASHPID", "COLUMNS", "LINES"}
    | {"BASH_ARGC", "BASH_ARGV", "BASH_REMATCH", "COMP_WORDBREAKS", "SHLVL", "MAPFILE", "REPLY"}
)
_OURS = re.compile(r"^__tether_|^__TETHER_V_")
# Lines a dump holds anew at every prompt without the user doing anything: the dump's own moment
# (clocks, random numbers, ``$_`` and the line numbers of the hook writing it) and tether's
# bookkeeping. No judgement reads their values (at the next command they differ again anyway).
# Each such line with the newline before it: a pattern that starts with a literal is searched for
# that literal, where one anchored at every line start (``^``, re.M) is tried at every character
# of the ~6 KB dump (three times slower, and run once a shell per call).
_CLOCKWORK = re.compile(
    r"\ndeclare -[-a-zA-Z]+ (?:_|B(?:ASH_COMMAND|ASH_LINENO|ASHPID)|LINENO|RANDOM|S(?:RANDOM|ECONDS)"
    r"|E(?:POCHREALTIME|POCHSECONDS)|HISTCMD|__tether_\w+)(?:=[^\n]*)?(?=\n)"
)
_DECLARE = re.compile(r"^declare -(\S+) ([^=\s]+)(?:=(.*))?$", re.S)
# tether's own prompt prefixes (see integration.script): removed before prompt strings are judged.
_OWN_PREFIX = re.compile(r"^(?:\\\[)?\\e\]6973;[0-9a-z]+;[PCQ];.*?\\a(?:\\\])?", re.S)
_OWN_HOOKS = frozenset({"__tether_pc0", "__tether_pc"})
_IMPLICIT_TRAPS = ("DEBUG", "RETURN", "ERR", "EXIT")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellState:
    """One shell's definitions at its last prompt (or at the moment it reported them)."""

    variables: Mapping[str, str] = field(default_factory=dict)
    arrays: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    namerefs: Mapping[str, str] = field(default_factory=dict)
    # name -> the whole definition as ``declare -f`` prints it; None: a function whose body was
    # not reported (only its name is known)
    functions: Mapping[str, str | None] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    traps: Mapping[str, str] = field(default_factory=dict)
    key: str = ""

    @property
    def histexpand(self) -> bool:
        return "histexpand" in self.variables.get("SHELLOPTS", "histexpand").split(":")

    @property
    def cwd(self) -> str:
        return self.variables.get("PWD", "")

    def with_bodies(self, other: ShellState) -> ShellState:
        """This state, with the function bodies ``other`` (a later, fuller report) holds."""
        functions = dict(self.functions)
        functions.update({k: v for k, v in other.functions.items() if v is not None})
        key = hashlib.blake2b((self.key + other.key).encode(), digest_size=12).hexdigest()
        return ShellState(
            variables=self.variables,
            arrays=self.arrays,
            namerefs=self.namerefs,
            functions=functions,
            aliases=self.aliases,
            traps=self.traps,
            key=key,
        )

    def implicit_code(self) -> Iterator[tuple[str, str]]:
        """Code bash runs on its own around every command: (what, code)."""
        for index, element in enumerate(self.arrays.get("PROMPT_COMMAND", ()) or ()):
            if element.strip() not in _OWN_HOOKS:
                yield f"PROMPT_COMMAND[{index}]", element
        scalar = self.variables.get("PROMPT_COMMAND")
        if scalar is not None:
            parts = [p for p in scalar.split(";") if p.strip() not in _OWN_HOOKS]
            if any(p.strip() for p in parts):
                yield "PROMPT_COMMAND", ";".join(parts)
        for name in ("PS0", "PS1", "PS2"):
            value = _OWN_PREFIX.sub("", self.variables.get(name, ""), count=1)
            if "$(" in value or "`" in value:
                yield name, prompt_code(value)
        for signal in _IMPLICIT_TRAPS:
            code = self.traps.get(signal)
            if code and not code.startswith("__tether_exit"):
                yield f"trap {signal}", code


# A `$` before a blank or a line's end is no expansion: bash keeps it as it is, but the parser
# calls a heredoc body line that starts with one an error: `PS1='$ '` was refused as unparseable.
_LONE_DOLLARS = re.compile(r"\$+(?=\s|$)")


def prompt_code(value: str) -> str:
    """A prompt string as code whose only commands are its substitutions (like an unquoted
    heredoc body: expanded, never run as a command line); a lone `$` is no substitution."""
    value = _LONE_DOLLARS.sub("", value)
    delimiter = "__tether_prompt"
    while any(line.startswith(delimiter) for line in value.split("\n")):
        delimiter += "_"
    return f": <<{delimiter}\n{value}\n{delimiter}"


def parse_dump(data: bytes) -> ShellState | None:
    """The state a shell wrote, or ``None`` when the dump is incomplete or not one."""
    text = _whole(data.decode("utf-8", "surrogateescape"))
    if text is None:
        return None
    head, sep, rest = text[len(STATE_MARK) + 1 :].partition("\n" + NAMES_MARK + "\n")
    names_text, sep2, code = rest.partition("\n" + CODE_MARK + "\n")
    if not sep or not sep2:
        return None
    parsed = _code_section(code)
    if parsed is None:
        return None
    aliases, traps, bodies = parsed
    variables, arrays, namerefs, keyed = _variables(head)
    functions: dict[str, str | None] = dict.fromkeys(_function_names(names_text))
    functions.update(bodies)
    digest = hashlib.blake2b(digest_size=12)
    digest.update("".join(keyed).encode("utf-8", "surrogateescape"))
    digest.update(names_text.encode("utf-8", "surrogateescape"))
    digest.update(code.encode("utf-8", "surrogateescape"))
    return ShellState(
        variables=variables,
        arrays=arrays,
        namerefs=namerefs,
        functions=functions,
        aliases=aliases,
        traps=traps,
        key=digest.hexdigest(),
    )


def dump_key(data: bytes) -> str | None:
    """The dump without its tag and its clockwork lines (``None`` while it is not whole): dumps
    with one key parse to states that differ only in values no judgement reads, so a state parsed
    at one prompt serves every later prompt until the user defines something.

    Clockwork lines are looked for in ``declare -p``'s section alone, where each line is one
    variable; the sections after it are kept whole, since a line inside an alias, a trap or a
    function body may look like one (``declare -- _=…`` in a quoted string spanning lines), and
    two definitions differing only there must not share a state."""
    text = _whole(data.decode("utf-8", "surrogateescape"))
    if text is None:
        return None
    end = text.find("\n" + NAMES_MARK + "\n") + 1  # 0: no such section (``parse_dump`` reads none)
    return _CLOCKWORK.sub("", text[:end]) + text[end:] if end else text


def _whole(text: str) -> str | None:
    """The dump alone, ending with its plain end marker (``None``: it is not yet whole).

    A dump whose markers carry a tag was written over the one before in place: it ends at the end
    marker with its tag (whatever follows is left of a longer dump before it). An untagged one
    (from bash without ``SRANDOM``) replaced the file, and ends with it."""
    first, newline, rest = text.partition("\n")
    if first == STATE_MARK:
        return text
    tag = first.removeprefix(STATE_MARK + " ")
    if not newline or tag == first or not tag:
        return None
    end = rest.find("\n" + END_MARK + " " + tag + "\n")
    if end < 0:
        return None
    return f"{STATE_MARK}\n{rest[: end + 1]}{END_MARK}\n"


# ---- declare -p --------------------------------------------------------------------------------


_Declared = tuple[str, str, str | tuple[str, ...]] | None  # (kind, name, value)
# Per line: what it declares, and whether it is part of the state's key (tether's own variables
# and those bash changes by itself from one prompt to the next are not).
_lines: dict[str, tuple[_Declared, bool]] = {}


def _declared(line: str) -> tuple[_Declared, bool]:
    """One ``declare -p`` line (cached: from one prompt to the next most lines are the same)."""
    known = _lines.get(line)
    if known is not None:
        return known
    match = _DECLARE.match(line)
    found: _Declared = None
    if match is not None and match[3] is not None and not _OURS.match(match[2]):
        flags, name, raw = match[1], match[2], match[3]
        if "a" in flags or "A" in flags:
            found = ("array", name, tuple(_array(raw)))
        else:
            found = ("nameref" if "n" in flags else "scalar", name, _scalar(raw))
    keyed = match is None or (match[2] not in _VOLATILE and not _OURS.match(match[2]))
    if len(_lines) >= 4096:
        _lines.clear()
    _lines[line] = (found, keyed)
    return found, keyed


def _variables(
    text: str,
) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, str], list[str]]:
    """The variables, arrays and namerefs ``declare -p`` printed, and the lines of the state's key."""
    variables: dict[str, str] = {}
    arrays: dict[str, tuple[str, ...]] = {}
    namerefs: dict[str, str] = {}
    keyed: list[str] = []
    for line in text.split("\n"):
        found, key = _declared(line)
        if key:
            keyed.append(line + "\n")
        if found is None:
            continue
        kind, name, value = found
        if isinstance(value, tuple):
            arrays[name] = value
        elif kind == "nameref":
            namerefs[name] = value
        else:
            variables[name] = value
    return variables, arrays, namerefs, keyed


def _scalar(raw: str) -> str:
    value, _ = _quoted(raw, 0)
    return value


def _quoted(raw: str, index: int) -> tuple[str, int]:
    """One value as ``declare -p`` quotes it ("…" or $'…' or bare) from ``index``; (value, end)."""
    if raw.startswith("$'", index):
        end = index + 2
        while end < len(raw) and raw[end] != "'":
            end += 2 if raw[end] == "\\" else 1
        return decode_ansi_c(raw[index + 2 : end]), end + 1
    if raw.startswith('"', index):
        out: list[str] = []
        end = index + 1
        while end < len(raw) and raw[end] != '"':
            if raw[end] == "\\" and end + 1 < len(raw) and raw[end + 1] in '"\\$`':
                out.append(raw[end + 1])
                end += 2
            else:
                out.append(raw[end])
                end += 1
        return "".join(out), end + 1
    end = index
    while end < len(raw) and raw[end] not in " )":
        end += 1
    return raw[index:end], end


def _array(raw: str) -> Iterator[str]:
    if not raw.startswith("("):
        yield _scalar(raw)
        return
    index = 1
    while index < len(raw):
        while index < len(raw) and raw[index] == " ":
            index += 1
        if index >= len(raw) or raw[index] == ")":
            return
        if raw[index] != "[":
            return
        index += 1
        if raw[index : index + 1] in ('"', "$"):
            _, index = _quoted(raw, index)
        while index < len(raw) and raw[index] != "]":
            index += 1
        index += 2  # "]="
        value, index = _quoted(raw, index)
        yield value


def _function_names(text: str) -> Iterator[str]:
    for line in text.split("\n"):
        if line.startswith("declare -f"):
            name = line.split(" ", 2)[-1]
            if not _OURS.match(name):
                yield name


# ---- aliases, traps, function bodies (bash code) ---------------------------------------------


_FUNCTION_START = re.compile(r"^(\S+) \(\) $")


_Code = tuple[dict[str, str], dict[str, str], dict[str, str]]
_code_cache: dict[str, _Code | None] = {}


def _code_section(code: str) -> _Code | None:
    """Aliases, traps and function bodies (cached: they change far less often than variables)."""
    if code in _code_cache:
        return _code_cache[code]
    found = _read_code(code)
    if len(_code_cache) >= 32:
        _code_cache.pop(next(iter(_code_cache)))
    _code_cache[code] = found
    return found


def _read_code(code: str) -> _Code | None:
    """One top-level statement at a time: a body tree-sitter cannot read spoils that function
    only (calling it is then refused as unparseable)."""
    lines = code.split("\n")
    while lines and not lines[-1]:
        lines.pop()
    if not lines or lines[-1] != END_MARK:
        return None
    aliases: dict[str, str] = {}
    traps: dict[str, str] = {}
    bodies: dict[str, str] = {}
    for chunk in _statements(lines[:-1]):
        head = _FUNCTION_START.match(chunk.split("\n", 1)[0])
        if head is not None:
            if not _OURS.match(head[1]):
                bodies[head[1]] = chunk
            continue
        for node in parse(lex(chunk).text).root_node.named_children:
            if node.type == "command":
                _command(node, aliases, traps)
    return aliases, traps, bodies


def _statements(lines: list[str]) -> Iterator[str]:
    """Complete statements: a function runs to its closing ``}`` line, anything else to the line
    where no quote or heredoc is left open."""
    current: list[str] = []
    function = False
    for line in lines:
        if not current:
            function = _FUNCTION_START.match(line) is not None
        current.append(line)
        if function:
            # ``declare -f`` indents a body; only its closing brace stands at the start of a line.
            if line == "}":
                yield "\n".join(current)
                current = []
            continue
        chunk = "\n".join(current)
        if "'" in chunk and lex(chunk).open:
            continue  # a quoted alias or trap value that runs on to the next line
        yield chunk
        current = []
    if current:
        yield "\n".join(current)


def _command(node: Node, aliases: dict[str, str], traps: dict[str, str]) -> None:
    name = node.child_by_field_name("name")
    args = [resolve(a).value for a in node.children_by_field_name("argument")]
    if name is None:
        return
    head = text_of(name)
    if head == "alias":
        for arg in args:
            key, eq, value = arg.partition("=")
            if eq:
                aliases[key] = value
    elif head == "trap" and len(args) >= 3 and args[0] == "--":
        for signal in args[2:]:
            traps[signal.removeprefix("SIG")] = args[1]
    elif head == "builtin" and args[:2] == ["hash", "-p"] and len(args) == 4 and _renamed(args[2], args[3]):
        # ``hash -p /bin/rm ls`` makes ``ls`` run /bin/rm: it reads like an alias of that path.
        aliases.setdefault(args[3], args[2])


def _renamed(path: str, command: str) -> bool:
    return posixpath.basename(path) != command
