"""The guard's view of a bash command line: every simple command it would run, in order.

Invariant: every simple command in the text is yielded — inside ``$(…)``, backticks, ``<(…)``,
pipelines, lists, subshells, braces, function bodies, ``if``/``for``/``while``/``case`` and heredoc
continuations — and again after each wrapper is peeled off (``sudo rm`` yields ``sudo …`` and
``rm …``). Code that a command runs from a string (``bash -c``, ``eval``, ``su -c``, ``env -S``,
``watch``, ``ssh``, a shell reading a literal heredoc or ``echo …|sh``, ``find -exec``) is parsed
again and walked the same way, at most ``MAX_DEPTH`` levels deep. So is code the *shell* runs on
a command's behalf: an alias (expanded as text), a shell function (its body, with the call's
arguments as ``$1``…), ``source <(…)``. What cannot be known is yielded as a ``Problem``
(unparseable text, too deep), a ``DynamicName`` (a command name that only run time decides) or a
``Hidden`` (a value or code only run time decides) — never skipped.

A ``WalkState`` carries what earlier commands defined — in the same text, or in earlier calls as
the shell reported them (``ShellState``): variables (split on the real ``IFS``), functions, aliases,
namerefs, the directory. Subshell scoping is ignored on purpose: ``(cd /); rm -rf *`` is judged as
if in ``/``, which errs on the side of refusing.

Tree-sitter quirks handled here, not in the rules: words after a redirect (``rm >/dev/null -rf /``)
parse as extra redirect destinations but are the command's arguments; ``cat <<EOF | sh`` nests
the pipeline inside the heredoc redirect; heredoc delimiters it would misread are renamed first
(``heredocs``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from tree_sitter import Node, Tree

from tether.shells.guard import stateful
from tether.shells.guard.argv import SHELLS, code_source, command_name, join_code, unwrap
from tether.shells.guard.events import (
    WRITE_OPS,
    DynamicName,
    Event,
    Feeder,
    FunctionDef,
    Hidden,
    Invocation,
    Problem,
    Redirect,
)
from tether.shells.guard.feed import (
    changed_directory,
    feeder_text,
    find_exec_commands,
    piped_text,
    stored_code,
    xargs_feed,
)
from tether.shells.guard.heredocs import prepared
from tether.shells.guard.scope import Scope
from tether.shells.guard.walkstate import WalkState, alias_expansion
from tether.shells.guard.words import Word, parse, resolve, resolve_fields, text_of

MAX_DEPTH = 8
_STDIN_OPS = frozenset({"<", "<&"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ctx:
    state: WalkState
    depth: int = 0
    feeders: tuple[Feeder, ...] = ()
    stdin: tuple[Node, ...] = ()
    extra_args: tuple[Node, ...] = ()
    statement: str = ""  # text of the enclosing redirected statement (for the argument quirk)

    def fresh(self) -> _Ctx:
        return _Ctx(depth=self.depth, state=self.state)


def events(
    code: str,
    depth: int = 0,
    cwd: str = "",
    known: Mapping[str, str] | None = None,
    *,
    state: WalkState | None = None,
    tree: Tree | None = None,
) -> Iterator[Event]:
    """Everything the guard judges in ``code``, in source order; parse errors come last.

    ``tree`` is ``code`` already parsed (as ``heredocs.prepared`` rewrote it)."""
    if depth > MAX_DEPTH:
        yield Problem(why=f"shell code nested more than {MAX_DEPTH} levels deep", text=code[:200])
        return
    if state is None:
        state = WalkState(Scope(known, cwd=cwd))
    if tree is None:
        tree = parse(prepared(code))
    root = tree.root_node
    yield from _walk(root, _Ctx(depth=depth, state=state))
    if root.has_error:
        near = _error_excerpt(root).strip()
        yield Problem(why=f"bash cannot parse this text (near {near[:60]!r})", text=code[:300])


def invocations_under(node: Node, depth: int) -> Iterator[Invocation | DynamicName]:
    """The commands a subtree runs (a pipeline stage, a ``$(…)``), for rules that look upstream."""
    for event in _walk(node, _Ctx(depth=depth, state=WalkState())):
        if isinstance(event, Invocation | DynamicName):
            yield event


def _error_excerpt(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            text = text_of(node) or text_of(node.parent or root)
            return (text or text_of(root))[:200]
        stack.extend(reversed(node.children))
    return text_of(root)[:200]


def _walk(node: Node, ctx: _Ctx) -> Iterator[Event]:
    kind = node.type
    if kind == "command":
        yield from _command(node, ctx)
    elif kind == "pipeline":
        yield from _pipeline(node, ctx)
    elif kind == "redirected_statement":
        yield from _redirected(node, ctx)
    elif kind == "function_definition":
        name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
        if name is not None and body is not None:
            defined = resolve(name).value
            ctx.state.functions[defined] = text_of(node)
            yield FunctionDef(name=defined, body=body, text=text_of(node))
        for child in node.named_children:
            yield from _walk(child, ctx)
    elif kind == "variable_assignment" and node.parent is not None and node.parent.type != "command":
        yield from stateful.assignment(node, ctx.state, _reparser(ctx), _walker(ctx), nameref=False)
    elif kind == "declaration_command":
        yield from stateful.declaration(node, ctx.state, _reparser(ctx), _walker(ctx))
    elif kind == "for_statement":
        yield from _for(node, ctx)
    elif kind == "unset_command":
        stateful.unset(node, ctx.state)
    elif kind in ("command_substitution", "process_substitution"):
        for child in node.named_children:
            yield from _walk(child, ctx.fresh())
    elif kind != "comment":
        for child in node.named_children:
            yield from _walk(child, ctx)


def _walker(ctx: _Ctx) -> stateful.Walker:
    def walk(node: Node) -> Iterator[Event]:
        return _walk(node, ctx.fresh())

    return walk


def _reparser(ctx: _Ctx, text: str = "") -> stateful.Reparser:
    def again(word: Word, what: str = "") -> Iterator[Event]:
        return _reparse(word, what or text or word.code, ctx, share=True)

    return again


_MAX_LOOP_WALKS = 16


def _for(node: Node, ctx: _Ctx) -> Iterator[Event]:
    """Walk a ``for`` body once per literal value, so ``for d in / ; do rm -rf $d`` is seen."""
    variable, body = node.child_by_field_name("variable"), node.child_by_field_name("body")
    values = node.children_by_field_name("value")
    for value in values:
        yield from _walk(value, ctx.fresh())
    if variable is None or body is None:
        return
    name = text_of(variable)
    scope = ctx.state.scope
    words = [w for value in values for w in resolve_fields(value, scope)]
    # Nested loops multiply the walks; past the cap the variable is simply unknown.
    factor = ctx.state.loop_factor * len(words)
    literal = words and factor <= _MAX_LOOP_WALKS and not any(w.dynamic for w in words)
    outer = ctx.state.loop_factor
    ctx.state.loop_factor = factor if literal else outer
    try:
        for word in words if literal else [None]:
            scope.assign(name, None if word is None else word.value)
            yield from _walk(body, ctx)
    finally:
        ctx.state.loop_factor = outer


def _pipeline(node: Node, ctx: _Ctx) -> Iterator[Event]:
    stages: list[list[Node]] = [[]]
    for child in node.children:
        if child.type in ("|", "|&"):
            stages.append([])
        elif child.is_named and child.type != "comment":
            stages[-1].append(child)
    feeders = ctx.feeders
    for index, stage in enumerate(stages):
        stage_ctx = replace(ctx, feeders=feeders, stdin=ctx.stdin if index == 0 else (), extra_args=())
        for child in stage:
            yield from _walk(child, stage_ctx)
        feeders = feeders + tuple(Feeder(node=child) for child in stage)


def _redirected(node: Node, ctx: _Ctx) -> Iterator[Event]:
    body = node.child_by_field_name("body")
    redirects = node.children_by_field_name("redirect")
    stdin: list[Node] = []
    extra: list[Node] = []
    for redirect in redirects:
        if redirect.type == "file_redirect":
            if _operator(redirect) in _STDIN_OPS:
                stdin.append(redirect)
            extra.extend(redirect.children_by_field_name("destination")[1:])
        elif redirect.type in ("heredoc_redirect", "herestring_redirect"):
            stdin.append(redirect)
    text = text_of(node)
    if body is not None:
        is_command = body.type == "command"
        yield from _walk(
            body,
            replace(
                ctx,
                stdin=ctx.stdin + tuple(stdin),
                extra_args=tuple(extra) if is_command else (),
                statement=text if is_command and extra else "",
            ),
        )
    for redirect in redirects:
        yield from _redirect(redirect, ctx, body, text)


def _operator(redirect: Node) -> str:
    for child in redirect.children:
        if not child.is_named:
            return child.type
    return ""


def _redirect(redirect: Node, ctx: _Ctx, body: Node | None, text: str) -> Iterator[Event]:
    if redirect.type == "file_redirect":
        op = _operator(redirect)
        destinations = redirect.children_by_field_name("destination")
        if destinations and op in WRITE_OPS:
            yield Redirect(op=op, target=resolve(destinations[0], ctx.state.scope), text=text)
        for destination in destinations[:1]:
            yield from _walk(destination, ctx.fresh())
        return
    for child in redirect.named_children:
        if child.type in ("heredoc_start", "heredoc_end"):
            continue
        if child.type == "pipeline" and body is not None:
            # `cat <<EOF | sh`: the heredoc statement is the first stage of this pipeline.
            feeder = Feeder(node=body, redirects=(redirect,))
            yield from _walk(child, _Ctx(depth=ctx.depth, state=ctx.state, feeders=(*ctx.feeders, feeder)))
        elif child.type == "file_redirect":
            yield from _redirect(child, ctx, body, text)
        else:
            yield from _walk(child, ctx.fresh())


def _command(node: Node, ctx: _Ctx) -> Iterator[Event]:
    text = ctx.statement or text_of(node)
    stdin = list(ctx.stdin)
    nested = ctx.fresh()
    # Substitutions run before the command they sit in, so their commands come first.
    for child in (*node.named_children, *ctx.extra_args):
        if child.type in _REDIRECTS:
            if child.type != "file_redirect" or _operator(child) in _STDIN_OPS:
                stdin.append(child)
            yield from _redirect(child, ctx, node, text)
        else:
            yield from _walk(child, nested)
    name = node.child_by_field_name("name")
    if name is None:
        return
    expanded = alias_expansion(node, name, ctx.state)
    if expanded is not None:
        alias, code = expanded
        ctx.state.expanding.add(alias)
        try:
            yield from _reparse(Word.literal(code), text, ctx, share=True)
        finally:
            ctx.state.expanding.discard(alias)
        return
    args = sorted((*node.children_by_field_name("argument"), *ctx.extra_args), key=lambda n: n.start_byte)
    scope = ctx.state.scope
    hidden: list[bool] = []
    argv = tuple(w for part in (name, *args) for w in resolve_fields(part, scope, hidden=hidden))
    if hidden:
        yield Hidden(why="it splits an expansion on an IFS only run time knows", text=text)
    if not argv:
        return
    assigns = tuple(
        resolve(value, scope)
        for child in node.named_children
        if child.type == "variable_assignment" and (value := child.child_by_field_name("value")) is not None
    )
    sub = replace(ctx, stdin=tuple(stdin), extra_args=(), statement="")
    yield from _run(argv, text, sub, direct=True, assigns=assigns)
    scope.last_arg = argv[-1].value if not argv[-1].dynamic else None


def _run(
    argv: tuple[Word, ...], text: str, ctx: _Ctx, *, direct: bool = False, assigns: tuple[Word, ...] = ()
) -> Iterator[Event]:
    head = argv[0]
    if head.dynamic:
        yield DynamicName(word=head, text=text)
        return
    name = command_name(head)
    if not name:
        return
    state = ctx.state
    if direct:
        if head.value in state.functions:
            yield from _call(head.value, argv, text, ctx)
        elif "/" not in head.value and state.functions.get("command_not_found_handle"):
            # Whatever bash cannot find runs the handler with the name and arguments.
            yield from _call(
                "command_not_found_handle", (Word.literal("command_not_found_handle"), *argv), text, ctx
            )
    yield Invocation(
        name=name, argv=argv, text=text, feeders=ctx.feeders, stdin=ctx.stdin, cwd=state.cwd, assigns=assigns
    )
    if direct and name in stateful.BUILTINS:
        yield from stateful.builtin(name, argv, text, state, _reparser(ctx, text), stdin_text(ctx))
    if name in ("cd", "pushd"):
        state.cwd = changed_directory(state.cwd, argv[1:])
        return
    if name in ("alias", "trap"):
        for code in stored_code(name, argv[1:]):
            yield from _reparse(code, text, ctx, share=True)
        return
    if name == "eval":
        if len(argv) > 1:
            yield from _reparse(join_code(argv[1:], ()), text, ctx, share=True)
        return
    if name in ("source", "."):
        yield from _source(argv, text, ctx)
        return
    if name in SHELLS:
        source = code_source(name, argv[1:])
        if source is not None:
            for word in source.inline:
                yield from _reparse(word, text, ctx)
            if source.script is not None and _substituted(source.script):
                yield from _source((head, source.script), text, ctx, share=False)
            literal = stdin_text(ctx) if source.stdin else None
            if literal is not None:
                yield from _reparse(Word.literal(literal), text, ctx)
        return
    if name == "find":
        yield from _find_exec(argv, text, ctx)
        return
    step = unwrap(argv, feed=_xargs_feed(ctx) if name == "xargs" else ())
    if step is None:
        return
    if step.code is not None:
        yield from _reparse(step.code, text, ctx)
    elif step.argv:
        yield from _run(step.argv, text, ctx)


def _call(function: str, argv: tuple[Word, ...], text: str, ctx: _Ctx) -> Iterator[Event]:
    """A shell function runs its body with the call's arguments as ``$1``…"""
    state = ctx.state
    definition = state.functions.get(function)
    if definition is None:
        yield Hidden(
            why=f"it calls the shell function {function}, whose body the guard has not read",
            text=text,
            needs=(function,),
        )
        return
    if function in state.calling:
        return
    scope = state.scope
    outer = scope.positional
    scope.positional = tuple(w.value for w in argv[1:])
    state.calling.add(function)
    try:
        yield from _reparse(Word.literal(definition), text, ctx, share=True)
    finally:
        state.calling.discard(function)
        scope.positional = outer


def _substituted(word: Word) -> bool:
    return word.node is not None and word.node.type == "process_substitution"


def _source(argv: tuple[Word, ...], text: str, ctx: _Ctx, *, share: bool = True) -> Iterator[Event]:
    """``source``/``.`` runs a file in this shell; ``<(…)`` or stdin is code the text may show."""
    if len(argv) < 2:
        return
    target = argv[1]
    code: str | None
    if _substituted(target):
        assert target.node is not None
        inner = [c for c in target.node.named_children if c.type != "comment"]
        code = feeder_text(Feeder(node=inner[0])) if len(inner) == 1 else None
    elif target.value in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
        code = stdin_text(ctx)
    else:
        return  # a file: what it holds is not in the text (see docs/safety.md)
    if code is None:
        yield Hidden(why=f"{command_name(argv[0])} runs code only run time knows", text=text)
        return
    yield from _reparse(Word.literal(code), text, ctx, share=share)


def _reparse(word: Word, text: str, ctx: _Ctx, *, share: bool = False) -> Iterator[Event]:
    """Walk code a command runs: in this shell (``share``: eval, source, aliases, functions,
    stored hooks) or in a child shell that starts from a copy of what is known."""
    if ctx.depth + 1 > MAX_DEPTH:
        yield Problem(why=f"shell code nested more than {MAX_DEPTH} levels deep", text=text)
        return
    code = word.value if not word.dynamic else word.code
    state = ctx.state if share else ctx.state.child()
    yield from events(code, depth=ctx.depth + 1, state=state)


def _find_exec(argv: tuple[Word, ...], text: str, ctx: _Ctx) -> Iterator[Event]:
    for words in find_exec_commands(argv):
        yield from _run(words, text, ctx.fresh())


def stdin_text(ctx: _Ctx) -> str | None:
    """The literal program a command reads on stdin, when the text shows it (heredoc, echo|)."""
    return piped_text(ctx.stdin, ctx.feeders)


def _xargs_feed(ctx: _Ctx) -> tuple[Word, ...]:
    return xargs_feed(ctx.stdin, ctx.feeders)
