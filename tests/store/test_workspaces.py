"""Workspaces: save/replace, list, restore descriptors, delete, validation, sharing across stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import NotFoundError, UsageError
from tether.store.db import Store
from tether.store.workspaces import ShellDescriptor, WorkspaceStore

WEB = ShellDescriptor(label="web", cwd="/srv/web", cols=120, rows=32, idle_minutes=30)
DB = ShellDescriptor(label="db", cwd="/srv/db", cols=80, rows=24)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path)
    yield s
    s.close()


def test_save_list_restore_delete(store: Store, tmp_path: Path) -> None:
    spaces = WorkspaceStore(store, clock=lambda: 1_700_000_000.5)
    saved, replaced = spaces.save("dev", [WEB, DB], actor="conv-a")
    assert not replaced and saved.saved_ms == 1_700_000_000_500
    # Another store object on the same file (another process) sees it.
    other = Store.open(tmp_path)
    try:
        assert WorkspaceStore(other).restore("dev") == (WEB, DB)
    finally:
        other.close()
    _, replaced = spaces.save("dev", [DB], actor="panel")
    assert replaced
    spaces.save("a-first", [WEB], actor="cli")
    assert [(w.name, w.actor, len(w.shells)) for w in spaces.list()] == [
        ("a-first", "cli", 1),
        ("dev", "panel", 1),
    ]
    assert spaces.restore("dev") == (DB,)
    assert spaces.restore("dev") == (DB,)  # restoring does not consume it
    assert spaces.delete("dev").shells == (DB,)
    with pytest.raises(NotFoundError, match="saved workspaces: a-first"):
        spaces.restore("dev")
    with pytest.raises(NotFoundError, match="no workspace named 'dev'"):
        spaces.delete("dev")
    assert spaces.get("a-first").shells[0].to_json() == {
        "label": "web",
        "cwd": "/srv/web",
        "cols": 120,
        "rows": 32,
        "idleMinutes": 30,
        "host": "local",
    }


@pytest.mark.parametrize("name", ["", "   ", "x" * 65, "a\nb", "tab\there"])
def test_bad_names(store: Store, name: str) -> None:
    with pytest.raises(UsageError, match="1-64 characters"):
        WorkspaceStore(store).save(name, [WEB], actor="a")


def test_name_of_64_characters(store: Store) -> None:
    name = "ws " + "x" * 61
    assert WorkspaceStore(store).save(name, [WEB], actor="a")[0].name == name


@pytest.mark.parametrize(
    ("shells", "message"),
    [
        ([], "1 to 64 shells"),
        ([WEB] * 65, "1 to 64 shells"),
        ([ShellDescriptor(label="x" * 33, cwd="/", cols=80, rows=24)], "label is longer than 32"),
        ([ShellDescriptor(label="", cwd="/", cols=19, rows=24)], "cols 19 is outside 20-1000"),
        ([ShellDescriptor(label="", cwd="/", cols=80, rows=501)], "rows 501 is outside 5-500"),
        ([ShellDescriptor(label="", cwd="/", cols=80, rows=24, idle_minutes=1441)], "idleMinutes"),
    ],
)
def test_bad_shells(store: Store, shells: list[ShellDescriptor], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        WorkspaceStore(store).save("w", shells, actor="a")


def test_a_descriptor_saved_before_hosts_opens_on_this_machine() -> None:
    old = {"label": "web", "cwd": "/srv", "cols": 80, "rows": 24, "idleMinutes": None}
    assert ShellDescriptor.from_json(old).host == "local"
    assert ShellDescriptor.from_json({**old, "host": "build"}).to_json()["host"] == "build"
