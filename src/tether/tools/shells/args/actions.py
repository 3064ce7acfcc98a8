"""``action`` blocks: for each tool, its kinds, and for each kind exactly its own payload (spec 003 §5).

Invariant: ``parse_action`` returns the dataclass of ``action.kind`` with every default filled in,
or raises ``UsageError``; a field that belongs to no kind, or to another kind, is refused with the
kind's allowed fields listed (§1: "各 kind 只接受自己的载荷"). tmux key names are checked against
tmux's own table, because tmux types an unknown name literally (``Ctrl-C`` would arrive as seven
letters, not as an interrupt).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tether.errors import UsageError
from tether.shell import PERMISSION_MODES
from tether.tools.shells.args.fields import Fields, describe, join
from tether.tools.shells.args.model import (
    Action,
    AuditAction,
    AuditSource,
    CloseAction,
    DoctorAction,
    IdleAction,
    MacroHistoryAction,
    MacroListAction,
    MacroRestoreAction,
    MacroRmAction,
    MacroSetAction,
    OpenAction,
    ReadAction,
    ReapAction,
    RenameAction,
    ResizeAction,
    RespawnAction,
    RetryAction,
    RunAction,
    SendAction,
    SnapshotAction,
    SnapshotListAction,
    SubscribeAction,
    ToolName,
    UnsubscribeAction,
    VaultListAction,
    WorkspaceDeleteAction,
    WorkspaceListAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.tools.shells.args.regex import compile_js_regex
from tether.tools.shells.args.steps import parse_steps

AUDIT_SOURCES: tuple[AuditSource, ...] = ("tool", "panel", "host", "cli")
SHELL_ID_RE = re.compile(r"dsh-[0-9a-z]{1,32}")
MAX_KEYS = 64
# tmux 3.3 key_string_table, compared case-insensitively as tmux does.
_TMUX_KEY_NAMES = frozenset(
    name.lower()
    for name in (
        *(f"F{i}" for i in range(1, 13)),
        *(
            [
                "IC",
                "Insert",
                "DC",
                "Delete",
                "Home",
                "End",
                "NPage",
                "PageDown",
                "PgDn",
                "PPage",
                "PageUp",
                "PgUp",
                "Tab",
                "BTab",
                "Space",
            ]
        ),
        *(
            [
                "BSpace",
                "Enter",
                "Escape",
                "Up",
                "Down",
                "Left",
                "Right",
                "KP/",
                "KP*",
                "KP-",
                "KP7",
                "KP8",
                "KP9",
                "KP+",
                "KP4",
                "KP5",
                "KP6",
                "KP1",
            ]
        ),
        *(["KP2", "KP3", "KPEnter", "KP0", "KP."]),
    )
)
_KEY_HINT = (
    "use tmux key names such as Enter, Escape, Tab, BSpace, Up, F1, C-c (Ctrl-C), M-x (Alt-x), "
    "or a single character; put plain text in text"
)

ActionParser = Callable[[Fields], Action]


def is_tmux_key(name: str) -> bool:
    """Whether tmux reads ``name`` as one key (modifiers ``C-``/``M-``/``S-``/``^``, a name, a char)."""
    rest = name
    while len(rest) > 2 and rest[1] == "-" and rest[0].upper() in "CMS":
        rest = rest[2:]
    if len(rest) > 1 and rest.startswith("^"):
        rest = rest[1:]
    if len(rest) == 1:
        return rest.isprintable()
    return rest.lower() in _TMUX_KEY_NAMES or re.fullmatch(r"0x[0-9a-fA-F]{1,6}", rest) is not None


def check_shell_id(value: str, where: str) -> str:
    if SHELL_ID_RE.fullmatch(value) is None:
        raise UsageError(
            f"{where}: {value!r} is not a shell id; ids look like dsh-ab12cd "
            "(dsh- then lowercase letters and digits)"
        )
    return value


def _keys(f: Fields, name: str) -> tuple[str, ...]:
    keys = f.string_list(name, what='tmux key names, e.g. ["Enter"] or ["C-c"]')
    if len(keys) > MAX_KEYS:
        raise f.fail(name, f"at most {MAX_KEYS} keys; got {len(keys)}")
    for i, key in enumerate(keys):
        if not is_tmux_key(key):
            ctrl = re.fullmatch(r"(?i)ctrl?[-+ ]?(.)", key)
            guess = f" (did you mean C-{ctrl.group(1).lower()}?)" if ctrl else ""
            raise UsageError(f"{f.at(name)}[{i}]: {key!r} is not a tmux key name{guess}; {_KEY_HINT}")
    return keys


# ---- shell_open ---------------------------------------------------------------------------------


def _open(f: Fields) -> OpenAction:
    from_id = f.string("from", what="an old shell id")
    return OpenAction(
        count=f.integer("count", lo=1, hi=64, default=1, unit="shells"),
        cwd=f.string("cwd", non_blank=True, what="a directory path"),
        label=f.string("label", max_len=32, non_blank=True),
        cols=f.integer("cols", lo=20, hi=1000, default=None, unit="columns"),
        rows=f.integer("rows", lo=5, hi=500, default=None, unit="rows"),
        idle_minutes=f.integer("idleMinutes", lo=0, hi=1440, default=None, unit="minutes"),
        watch=f.boolean("watch", default=False),
        from_id=None if from_id is None else check_shell_id(from_id, f.at("from")),
        sandbox_permissions=f.enum("sandbox_permissions", PERMISSION_MODES, default=None),
        justification=f.string("justification", what="why the shell needs a wider sandbox"),
        host=f.string(
            "host", max_len=32, non_blank=True, what="a host name ('local' or one of config.toml [hosts])"
        ),
    )


# ---- shell_run ----------------------------------------------------------------------------------


def _run(f: Fields) -> RunAction:
    if not f.has("command"):
        raise f.fail(
            "command", "required when kind=run (shell_run.action.command); add the command, or use kind=steps"
        )
    return RunAction(command=f.required_string("command", what="a command"))


def _retry(f: Fields) -> RetryAction:
    return RetryAction(
        mode=f.required_enum(
            "mode",
            ("last", "last-failed"),
            why="last reruns the shell's latest command; last-failed only if it failed",
        )
    )


# ---- shell_send ---------------------------------------------------------------------------------


def _send(f: Fields) -> SendAction:
    if not f.has("text"):
        raise f.missing("text", 'a string without newlines; pass "" to send only keys')
    text = f.required_string("text", non_blank=False, what="a string without newlines")
    if "\n" in text or "\r" in text:
        raise f.fail(
            "text",
            "must not contain a newline (\\n or \\r), which the terminal takes as Enter; send one line "
            'and add keys: ["Enter"], or use shell_run for a multi-line command',
        )
    return SendAction(text=text, keys=_keys(f, "keys"), pre_keys=_keys(f, "preKeys"))


# ---- shell_read ---------------------------------------------------------------------------------


def _read(f: Fields) -> ReadAction:
    search = f.string("search", what="a JavaScript regular expression")
    if search == "":
        raise f.fail("search", "must not be empty; omit it to read without searching")
    action = ReadAction(
        search=search,
        regex=None if search is None else compile_js_regex(search, field=f.at("search")),
        context=f.budget("context", lo=0, hi=8, default=0, unit="lines"),
        match_offset=f.integer("matchOffset", lo=0, hi=100_000, default=0, unit="matches"),
        mode=f.enum("mode", ("tail", "screen", "history", "since", "diff", "summary"), default="tail"),
        if_changed=f.boolean("ifChanged", default=False),
        before=f.integer("before", lo=0, hi=2**53 - 1, default=None, unit="log offset"),
    )
    if action.before is not None and (action.mode != "history" or search is not None):
        raise f.fail(
            "before",
            "pages mode=history (pass the before=N a history read returned) and cannot be combined "
            f"with {'search' if search is not None else f'mode={action.mode}'}",
        )
    return action


# ---- shell_manage -------------------------------------------------------------------------------


def _name(f: Fields, what: str, max_len: int | None = 64) -> str:
    return f.required_string("name", max_len=max_len, what=what)


def _macro_name(f: Fields) -> str:
    name = _name(f, "a macro name")
    if re.search(r"[\s/]", name):
        raise f.fail("name", f"a macro name has no spaces or '/' (it is invoked as /NAME); got {name!r}")
    return name


def _resize(f: Fields) -> ResizeAction:
    action = ResizeAction(
        cols=f.integer("cols", lo=20, hi=1000, default=None, unit="columns"),
        rows=f.integer("rows", lo=5, hi=500, default=None, unit="rows"),
    )
    if action.cols is None and action.rows is None:
        raise UsageError(f"{f.path}: kind=resize needs cols (20-1000), rows (5-500), or both")
    return action


def _macro_set(f: Fields) -> MacroSetAction:
    text = f.required_string("text", what="the macro's text")
    return MacroSetAction(
        name=_macro_name(f),
        text=text,
        scope=f.enum("scope", ("global", "conversation", "shell"), default="conversation"),
        submit=f.boolean("submit", default=True),
        note=f.string("note"),
    )


def _audit(f: Fields) -> AuditAction:
    return AuditAction(
        actor=f.string("actor", non_blank=True, what="an actor id (conversation id, panel or cli)"),
        source=f.enum("source", AUDIT_SOURCES, default=None),
        days=f.budget("days", lo=1, hi=3650, default=1, unit="days"),
        export=f.boolean("export", default=False),
    )


# Fields of kind=open that exist only where the deployment confines (the tool refuses them elsewhere).
CONFINED_OPEN_FIELDS = ("sandbox_permissions", "justification")

# kind -> (allowed payload fields besides "kind", parser), per tool, in the spec's order.
KINDS: Mapping[ToolName, Mapping[str, tuple[tuple[str, ...], ActionParser]]] = {
    "shell_open": {
        "open": (
            (
                "count",
                "cwd",
                "label",
                "cols",
                "rows",
                "idleMinutes",
                "watch",
                "from",
                "host",
                *CONFINED_OPEN_FIELDS,
            ),
            _open,
        ),
    },
    "shell_run": {
        "run": (("command",), _run),
        "steps": (("steps",), parse_steps),
        "retry": (("mode",), _retry),
    },
    "shell_send": {"send": (("text", "keys", "preKeys"), _send)},
    "shell_read": {
        "read": (("search", "context", "matchOffset", "mode", "ifChanged", "before"), _read),
        "subscribe": ((), lambda f: SubscribeAction()),
        "unsubscribe": ((), lambda f: UnsubscribeAction()),
    },
    "shell_manage": {
        "rename": (("newName",), lambda f: RenameAction(new_name=f.required_string("newName", max_len=32))),
        "resize": (("cols", "rows"), _resize),
        "respawn": ((), lambda f: RespawnAction()),
        "close": ((), lambda f: CloseAction()),
        "reap": ((), lambda f: ReapAction()),
        "idle": (
            ("idleMinutes",),
            lambda f: IdleAction(
                idle_minutes=f.integer("idleMinutes", lo=0, hi=1440, default=0, unit="minutes")
            ),
        ),
        "snapshot": ((), lambda f: SnapshotAction()),
        "snapshot-list": ((), lambda f: SnapshotListAction()),
        "doctor": (("note",), lambda f: DoctorAction(note=f.string("note"))),
        "macro-set": (("name", "text", "scope", "submit", "note"), _macro_set),
        "macro-rm": (("name",), lambda f: MacroRmAction(name=_macro_name(f))),
        "macro-list": ((), lambda f: MacroListAction()),
        "vault-list": ((), lambda f: VaultListAction()),
        "macro-history": (
            ("name", "days"),
            lambda f: MacroHistoryAction(
                name=_macro_name(f), days=f.budget("days", lo=1, hi=3650, default=7, unit="days")
            ),
        ),
        "macro-restore": (
            ("name", "at"),
            lambda f: MacroRestoreAction(
                name=_macro_name(f),
                at=f.required_integer(
                    "at", lo=0, hi=2**53 - 1, unit="epoch ms", why="a timestamp listed by macro-history"
                ),
            ),
        ),
        "workspace-save": (("name",), lambda f: WorkspaceSaveAction(name=_name(f, "a workspace name"))),
        "workspace-list": ((), lambda f: WorkspaceListAction()),
        "workspace-restore": (
            ("name",),
            lambda f: WorkspaceRestoreAction(name=_name(f, "a workspace name")),
        ),
        "workspace-delete": (("name",), lambda f: WorkspaceDeleteAction(name=_name(f, "a workspace name"))),
    },
    "shell_audit": {"audit": (("actor", "source", "days", "export"), _audit)},
}

EXAMPLES: Mapping[ToolName, str] = {
    "shell_open": '{ "kind": "open" }',
    "shell_run": '{ "kind": "run", "command": "ls" }',
    "shell_send": '{ "kind": "send", "text": "", "keys": ["C-c"] }',
    "shell_read": '{ "kind": "read", "mode": "tail" }',
    "shell_manage": '{ "kind": "close" }',
    "shell_audit": '{ "kind": "audit", "days": 1 }',
}


def _tool_of(kind: str) -> ToolName | None:
    for tool, kinds in KINDS.items():
        if kind in kinds:
            return tool
    return None


def parse_action(tool: ToolName, raw: Any, path: str) -> Action:
    """Parse ``raw`` (the ``action`` block at ``path``) for ``tool``."""
    kinds = KINDS[tool]
    if raw is None:
        raise UsageError(
            f"{path}: required; every task does exactly one operation, named by action.kind "
            f"({join(kinds)}), e.g. {EXAMPLES[tool]}"
        )
    f = Fields(raw, path)
    kind = f.get("kind")
    if kind is None:
        raise f.missing("kind", f"one of {join(kinds)}")
    if not isinstance(kind, str) or kind not in kinds:
        owner = _tool_of(kind) if isinstance(kind, str) else None
        elsewhere = f"; {kind!r} is a kind of {owner}" if owner is not None else ""
        raise f.fail("kind", f"{tool} kinds are {join(kinds)}; got {describe(kind)}{elsewhere}")
    allowed, parser = kinds[kind]
    extra = f.unknown(("kind", *allowed))
    if extra:
        others = sorted({k for name in extra for k, (fields, _) in kinds.items() if name in fields} - {kind})
        hint = "pass only this kind's own fields"
        if others:
            hint += f" ({join(extra)}: for kind={'/'.join(others)})"
        f.only(("kind", *allowed), context=f"for kind={kind}", hint=hint)
    return parser(f)
