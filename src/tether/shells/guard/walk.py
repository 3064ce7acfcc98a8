"""The guard's view of a bash command line: every simple command it would run, in order.

Invariant: every simple command in the text is yielded — inside ``$(…)``, backticks, ``<(…)``,
pipelines, lists, subshells, braces, function bodies, ``if``/``for``/``while``/``case`` and heredoc
continuations — and again after each wrapper is peeled off (``sudo rm`` yields ``sudo …`` and
``rm …``). Code that a command runs from a string (``bash -c``, ``eval``, ``su -c``, ``env -S``,
``watch``, ``ssh``, a shell reading a literal heredoc or ``echo …|sh``, ``find -exec``) is parsed
again and walked the same way, at most ``MAX_DEPTH`` levels deep. What cannot be known is yielded
as a ``Problem`` (unparseable text, too deep) or a ``DynamicName`` (a command name that only run
time decides) — never skipped.

Tree-sitter quirks handled here, not in the rules: words after a redirect (``rm >/dev/null -rf /``)
parse as extra redirect destinations but are the command's arguments; ``cat <<EOF | sh`` nests
the pipeline inside the heredoc redirect.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from tree_sitter import Node

from tether.shells.guard.argv import SHELLS, code_source, command_name, find_parts, join_code, unwrap
from tether.shells.guard.events import (
    WRITE_OPS,
    DynamicName,
    Event,
    Feeder,
    FunctionDef,
    Invocation,
    Problem,
    Redirect,
)
from tether.shells.guard.feed import changed_directory, feeder_text, redirect_text, simple_argv, stored_code
from tether.shells.guard.words import Word, parse, resolve, text_of

MAX_DEPTH = 8
_STDIN_OPS = frozenset({"<", "<&"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class _State:
    """What earlier literal commands in the same text tell: the ``cd`` directory, ``X=…`` values.

    Shared along one walk. Subshell scoping is ignored on purpose: ``(cd /); rm -rf *`` is
    judged as if in ``/``, which errs on the side of refusing.
    """

    __slots__ = ("cwd", "loop_factor", "vars")

    def __init__(self, cwd: str = "", known: Mapping[str, str] | None = None) -> None:
        self.cwd = cwd
        self.vars: dict[str, str] = dict(known or {})
        self.loop_factor = 1  # how many times the current body is being walked, over all loops


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ctx:
    state: _State
    depth: int = 0
    feeders: tuple[Feeder, ...] = ()
    stdin: tuple[Node, ...] = ()
    extra_args: tuple[Node, ...] = ()
    statement: str = ""  # text of the enclosing redirected statement (for the argument quirk)

    def fresh(self) -> _Ctx:
        return _Ctx(depth=self.depth, state=self.state)


def events(
    code: str, depth: int = 0, cwd: str = "", known: Mapping[str, str] | None = None
) -> Iterator[Event]:
    """Everything the guard judges in ``code``, in source order; parse errors come last."""
    if depth > MAX_DEPTH:
        yield Problem(why=f"shell code nested more than {MAX_DEPTH} levels deep", text=code[:200])
        return
    tree = parse(code)
    root = tree.root_node
    yield from _walk(root, _Ctx(depth=depth, state=_State(cwd, known)))
    if root.has_error:
        near = _error_excerpt(root).strip()
        yield Problem(why=f"bash cannot parse this text (near {near[:60]!r})", text=code[:300])


def invocations_under(node: Node, depth: int) -> Iterator[Invocation | DynamicName]:
    """The commands a subtree runs (a pipeline stage, a ``$(…)``), for rules that look upstream."""
    for event in _walk(node, _Ctx(depth=depth, state=_State())):
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
            yield FunctionDef(name=resolve(name).value, body=body, text=text_of(node))
        for child in node.named_children:
            yield from _walk(child, ctx)
    elif kind == "variable_assignment" and node.parent is not None and node.parent.type != "command":
        yield from _assignment(node, ctx)
    elif kind == "for_statement":
        yield from _for(node, ctx)
    elif kind == "unset_command":
        for child in node.named_children:
            ctx.state.vars.pop(text_of(child), None)
    elif kind in ("command_substitution", "process_substitution"):
        for child in node.named_children:
            yield from _walk(child, ctx.fresh())
    elif kind != "comment":
        for child in node.named_children:
            yield from _walk(child, ctx)


def _assignment(node: Node, ctx: _Ctx) -> Iterator[Event]:
    for child in node.named_children:
        yield from _walk(child, ctx.fresh())
    name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
    if name is None:
        return
    word = resolve(value, ctx.state.vars) if value is not None else Word.literal("")
    key = text_of(name)
    if word.dynamic:
        ctx.state.vars.pop(key, None)
    else:
        ctx.state.vars[key] = word.value
    if key == "PROMPT_COMMAND":
        # bash runs it before every prompt: it is code, stored for later.
        yield from _reparse(word, text_of(node), ctx)


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
    words = [resolve(value, ctx.state.vars) for value in values]
    # Nested loops multiply the walks; past the cap the variable is simply unknown.
    factor = ctx.state.loop_factor * len(words)
    literal = words and factor <= _MAX_LOOP_WALKS and not any(w.dynamic for w in words)
    outer = ctx.state.loop_factor
    ctx.state.loop_factor = factor if literal else outer
    try:
        for word in words if literal else [None]:
            if word is None:
                ctx.state.vars.pop(name, None)
            else:
                ctx.state.vars[name] = word.value
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
            yield Redirect(op=op, target=resolve(destinations[0], ctx.state.vars), text=text)
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
    args = sorted((*node.children_by_field_name("argument"), *ctx.extra_args), key=lambda n: n.start_byte)
    known = ctx.state.vars
    argv = (resolve(name, known), *(resolve(arg, known) for arg in args))
    yield from _run(argv, text, replace(ctx, stdin=tuple(stdin), extra_args=(), statement=""))


def _run(argv: tuple[Word, ...], text: str, ctx: _Ctx) -> Iterator[Event]:
    head = argv[0]
    if head.dynamic:
        yield DynamicName(word=head, text=text)
        return
    name = command_name(head)
    if not name:
        return
    yield Invocation(name=name, argv=argv, text=text, feeders=ctx.feeders, stdin=ctx.stdin, cwd=ctx.state.cwd)
    if name in ("cd", "pushd"):
        ctx.state.cwd = changed_directory(ctx.state.cwd, argv[1:])
        return
    if name in ("alias", "trap"):
        for code in stored_code(name, argv[1:]):
            yield from _reparse(code, text, ctx)
        return
    if name == "eval":
        if len(argv) > 1:
            yield from _reparse(join_code(argv[1:], ()), text, ctx)
        return
    if name in SHELLS:
        source = code_source(name, argv[1:])
        if source is not None:
            for word in source.inline:
                yield from _reparse(word, text, ctx)
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


def _reparse(word: Word, text: str, ctx: _Ctx) -> Iterator[Event]:
    if ctx.depth + 1 > MAX_DEPTH:
        yield Problem(why=f"shell code nested more than {MAX_DEPTH} levels deep", text=text)
        return
    yield from events(word.code, depth=ctx.depth + 1, cwd=ctx.state.cwd, known=ctx.state.vars)


def _find_exec(argv: tuple[Word, ...], text: str, ctx: _Ctx) -> Iterator[Event]:
    roots, expression = find_parts(argv[1:])
    index = 0
    while index < len(expression):
        if expression[index].value not in ("-exec", "-execdir", "-ok", "-okdir"):
            index += 1
            continue
        end = index + 1
        while end < len(expression) and expression[end].value not in (";", "+"):
            end += 1
        segment = expression[index + 1 : end]
        index = end + 1
        if not segment:
            continue
        # `{}` is each path find reports, and find reports its starting points first.
        for root in roots[:4]:
            words = tuple(_substitute(word, "{}", root) for word in segment)
            yield from _run(words, text, ctx.fresh())


def _substitute(word: Word, marker: str, root: Word) -> Word:
    if marker not in word.value:
        return word
    return Word(
        value=word.value.replace(marker, root.value),
        code=word.code.replace(marker, root.code),
        dynamic=word.dynamic or root.dynamic,
        node=word.node,
    )


def stdin_text(ctx: _Ctx) -> str | None:
    """The literal program a command reads on stdin, when the text shows it (heredoc, echo|)."""
    if ctx.stdin:
        return redirect_text(ctx.stdin[-1])
    if ctx.feeders:
        return feeder_text(ctx.feeders[-1])
    return None


def _xargs_feed(ctx: _Ctx) -> tuple[Word, ...]:
    """The words ``xargs`` appends, when the stage before it shows them (echo, printf, find)."""
    text = stdin_text(ctx)
    if text is not None:
        return tuple(Word.literal(part) for part in text.split())
    if ctx.stdin or not ctx.feeders:
        return ()
    feeder = ctx.feeders[-1]
    found = simple_argv(feeder.node)
    if found is not None and not found[0][0].dynamic and command_name(found[0][0]) == "find":
        return find_parts(found[0][1:])[0]
    return ()
