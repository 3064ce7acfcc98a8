"""Macros: scopes and precedence, history with unique timestamps, restore, expansion rules."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import NotFoundError, UsageError
from tether.shells.macros.expand import (
    EXIT_WAIT_REFUSAL,
    MacroExpander,
    check_exit_wait,
    expand,
    is_macro_invocation,
    parse_macro_call,
)
from tether.store.db import Store
from tether.store.macros import DAY_MS, Macro, MacroStore, MacroView

CONV = "conv-a"
SHELL = "dsh-aaaaaa"
VIEW = MacroView(conversation=CONV, shell=SHELL)


class Clock:
    def __init__(self, ms: int = 1_700_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path)
    yield s
    s.close()


def test_scopes_and_precedence(store: Store) -> None:
    macros = MacroStore(store)
    macros.set("b", "echo global", view=VIEW, actor=CONV, scope="global")
    macros.set("b", "echo conv", view=VIEW, actor=CONV)  # default scope: conversation
    assert macros.get("b", VIEW).text == "echo conv"  # type: ignore[union-attr]
    macros.set("b", "echo shell", view=VIEW, actor=CONV, scope="shell")
    assert macros.get("b", VIEW).text == "echo shell"  # type: ignore[union-attr]
    # Another conversation in another shell sees only the global one.
    other = MacroView(conversation="conv-b", shell="dsh-bbbbbb")
    assert [m.text for m in macros.visible(other)] == ["echo global"]
    # Same conversation, no shell: conversation wins over global.
    assert macros.table(MacroView(conversation=CONV))["b"].text == "echo conv"
    shadowed = macros.visible(VIEW, shadowed=True)
    assert [(m.scope, m.text) for m in shadowed] == [
        ("shell", "echo shell"),
        ("conversation", "echo conv"),
        ("global", "echo global"),
    ]
    # Removing without a scope removes the most specific; the next one shows through.
    removed = macros.remove("b", view=VIEW, actor=CONV)
    assert removed.scope == "shell"
    assert macros.get("b", VIEW).text == "echo conv"  # type: ignore[union-attr]
    macros.remove("b", view=VIEW, actor=CONV, scope="global")
    assert macros.get("b", VIEW, scope="global") is None


def test_shell_scope_needs_a_shell(store: Store) -> None:
    with pytest.raises(UsageError, match="needs a shell"):
        MacroStore(store).set("x", "ls", view=MacroView(conversation=CONV), actor=CONV, scope="shell")


@pytest.mark.parametrize("name", ["", "a b", "a/b", "/x", "x" * 65, "é", "a\nb", "semi;colon"])
def test_name_rule(store: Store, name: str) -> None:
    with pytest.raises(UsageError, match="A-Z a-z 0-9"):
        MacroStore(store).set(name, "ls", view=VIEW, actor=CONV)


def test_name_rule_accepts_the_documented_characters(store: Store) -> None:
    name = "Build_1.x-" + "y" * 54
    assert len(name) == 64
    assert MacroStore(store).set(name, "ls", view=VIEW, actor=CONV).name == name


def test_text_limits(store: Store) -> None:
    macros = MacroStore(store)
    with pytest.raises(UsageError, match="empty or blank"):
        macros.set("x", "  ", view=VIEW, actor=CONV)
    with pytest.raises(UsageError, match="at most 65536"):
        macros.set("x", "a" * 65537, view=VIEW, actor=CONV)


def test_history_and_restore(store: Store) -> None:
    clock = Clock()
    macros = MacroStore(store, clock=clock)
    v1 = macros.set("deploy", "make v1", view=VIEW, actor=CONV, note="first")
    v2 = macros.set("deploy", "make v2", view=VIEW, actor=CONV, submit=False)  # same ms as v1
    assert v2.updated_ms == v1.updated_ms + 1  # timestamps are unique even within one millisecond
    clock.ms += 10 * DAY_MS
    macros.remove("deploy", view=VIEW, actor="conv-b")
    assert macros.get("deploy", VIEW) is None
    restored = macros.restore("deploy", v1.updated_ms, view=VIEW, actor="panel")
    assert (restored.text, restored.submit, restored.note, restored.actor) == (
        "make v1",
        True,
        "first",
        "panel",
    )
    assert macros.get("deploy", VIEW) == restored
    # Last 7 days: only the removal and the restore; 30 days: everything, oldest first.
    recent = macros.history("deploy", VIEW, days=7)
    assert [e.op for e in recent] == ["remove", "restore"]
    assert recent[1].restored_from == v1.updated_ms
    full = macros.history("deploy", VIEW, days=30)
    assert [(e.op, e.text) for e in full] == [
        ("set", "make v1"),
        ("set", "make v2"),
        ("remove", None),
        ("restore", "make v1"),
    ]
    assert [e.at_ms for e in full] == sorted({e.at_ms for e in full})
    # Restore to v2, itself an entry; and to the restore entry.
    assert macros.restore("deploy", v2.updated_ms, view=VIEW, actor=CONV).submit is False
    assert macros.restore("deploy", full[3].at_ms, view=VIEW, actor=CONV).text == "make v1"
    assert len(macros.history("deploy", VIEW, days=30)) == 6


def test_restore_errors(store: Store) -> None:
    macros = MacroStore(store)
    v1 = macros.set("x", "ls", view=VIEW, actor=CONV)
    gone = macros.remove("x", view=VIEW, actor=CONV)
    assert gone.text == "ls"
    removal = macros.history("x", VIEW)[-1]
    with pytest.raises(UsageError, match="is a removal"):
        macros.restore("x", removal.at_ms, view=VIEW, actor=CONV)
    with pytest.raises(NotFoundError, match="macro-history"):
        macros.restore("x", v1.updated_ms + 999, view=VIEW, actor=CONV)
    # A version in another conversation's scope is not reachable from here.
    with pytest.raises(NotFoundError):
        macros.restore("x", v1.updated_ms, view=MacroView(conversation="conv-z"), actor="conv-z")
    with pytest.raises(NotFoundError, match="macro-list"):
        macros.remove("x", view=VIEW, actor=CONV)
    with pytest.raises(UsageError, match="1 to 3650"):
        macros.history("x", VIEW, days=0)


def _set_many(home: str, tag: str, count: int) -> None:
    store = Store.open(Path(home))
    macros = MacroStore(store)
    for i in range(count):
        macros.set("shared", f"echo {tag}{i}", view=MacroView(conversation=tag), actor=tag, scope="global")
    store.close()


def test_two_processes_keep_unique_ordered_history(tmp_path: Path) -> None:
    Store.open(tmp_path).close()  # see test_locks: concurrent creation of a fresh database
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_set_many, args=(str(tmp_path), tag, 100)) for tag in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    store = Store.open(tmp_path)
    events = MacroStore(store).history("shared", MacroView(conversation="x"), days=1)
    assert len(events) == 200
    assert len({e.at_ms for e in events}) == 200
    # Each writer's own entries appear in its own order.
    for tag in ("p", "q"):
        mine = [e.text for e in events if e.actor == tag]
        assert mine == [f"echo {tag}{i}" for i in range(100)]
    store.close()


# ---- expansion ----------------------------------------------------------------------------------


def _m(name: str, text: str, *, submit: bool = True) -> Macro:
    return Macro(
        name=name, text=text, scope="global", owner="", submit=submit, note=None, updated_ms=1, actor="t"
    )


TABLE = {
    "build": _m("build", "make -j8"),
    "greet": _m("greet", "printf '%s and %s\\n' {{1}} {{2}}", submit=False),
    "all": _m("all", "echo [{{@}}]"),
    "cols": _m("cols", "awk '{print $1}' "),
    "tmp": _m("tmp", "cd /tmp"),
}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("/build", "make -j8"),
        ("/build install DESTDIR=/x", "make -j8 install DESTDIR=/x"),
        ("/build\tinstall", "make -j8 install"),
        ("/greet 'a b' c", "printf '%s and %s\\n' 'a b' c"),
        ("/greet one", "printf '%s and %s\\n' one "),
        ("/greet '$(rm -rf ~)'", "printf '%s and %s\\n' '$(rm -rf ~)' "),
        ("/all x  'y z'", "echo [x  'y z']"),
        ("/cols file.txt", "awk '{print $1}' file.txt"),  # $1 is the shell's, not a placeholder
        ("/tmp", "cd /tmp"),
    ],
)
def test_expansion(command: str, expected: str) -> None:
    result = expand(command, TABLE)
    assert result.expanded and result.text == expected
    assert result.submit == TABLE[command[1:].split()[0]].submit
    assert is_macro_invocation(command, TABLE)


@pytest.mark.parametrize(
    "command",
    [
        "build",
        " /build",
        "/usr/bin/env ls",
        "/build/x",
        "/tmp/x",
        "./build",
        "ls /build",
        "/unknown arg",
        "/build; rm x",
        "/build\necho 2",
        "echo /build",
        "",
    ],
)
def test_not_expanded(command: str) -> None:
    result = expand(command, TABLE)
    assert not result.expanded and result.text == command and result.macro is None
    assert not is_macro_invocation(command, TABLE)


def test_parse_macro_call() -> None:
    assert parse_macro_call("/x  a b ") == parse_macro_call("/x a b")
    assert parse_macro_call("/x") is not None and parse_macro_call("/x").args == ""  # type: ignore[union-attr]
    assert parse_macro_call("x") is None


def test_unsplittable_args_with_word_placeholders() -> None:
    with pytest.raises(UsageError, match="close the quote"):
        expand("/greet 'open", TABLE)
    assert expand("/all 'open", TABLE).text == "echo ['open]"  # {{@}} takes it as written


def test_exit_wait_refusal_uses_the_spec_wording() -> None:
    with pytest.raises(UsageError) as err:
        check_exit_wait("/build", TABLE, "exit")
    assert str(err.value) == EXIT_WAIT_REFUSAL
    assert "__DSH_EXIT__" in EXIT_WAIT_REFUSAL and 'wait.kind="idle"' in EXIT_WAIT_REFUSAL
    check_exit_wait("/build", TABLE, "idle")
    check_exit_wait("make -j8", TABLE, "exit")
    check_exit_wait("/nope", TABLE, "exit")


def test_expander_reads_the_store(store: Store) -> None:
    macros = MacroStore(store)
    macros.set("b", "echo conv", view=VIEW, actor=CONV)
    macros.set("b", "echo shell {{1}}", view=VIEW, actor=CONV, scope="shell", submit=False)
    expander = MacroExpander(macros)
    result = expander.expand("/b x", VIEW)
    assert (result.text, result.submit, result.macro.scope) == ("echo shell x", False, "shell")  # type: ignore[union-attr]
    assert expander.expand("/b x", MacroView(conversation=CONV)).text == "echo conv x"
    assert not expander.is_invocation("/b", MacroView(conversation="other"))
    with pytest.raises(UsageError, match="__DSH_EXIT__"):
        expander.check_exit_wait("/b", VIEW, "exit")
    expander.check_exit_wait("/b", MacroView(conversation="other"), "exit")
