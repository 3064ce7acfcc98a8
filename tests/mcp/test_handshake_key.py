"""The handshake cache's key follows every source file the answers could come from, and only those."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.mcp import handshake


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tether"
    (root / "tools" / "bash").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "bash" / "tools.py").write_text("DESCRIPTION = 'one'\n")
    (root / "__pycache__").mkdir()
    (root / "panel" / "static" / "node_modules").mkdir(parents=True)
    monkeypatch.setattr(handshake, "_PACKAGE_DIR", root)
    return root


def _key(home: Path) -> str:
    return handshake.build_key(home, ())


def _files(root: Path) -> list[str]:
    seen: list[str] = []
    handshake._add_tree(lambda path, *_stamp: seen.append(path), root)
    return seen


def test_every_source_file_is_in_the_key_in_a_fixed_order(package: Path) -> None:
    assert _files(package) == ["__init__.py", "tools/__init__.py", "tools/bash/tools.py"]


def test_an_edited_nested_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path)
    assert _key(tmp_path) == before
    (package / "tools" / "bash" / "tools.py").write_text("DESCRIPTION = 'two, longer'\n")
    assert _key(tmp_path) != before


def test_a_touched_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path)
    target = package / "tools" / "__init__.py"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert _key(tmp_path) != before


def test_caches_vendored_code_and_linked_directories_are_left_out(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path)
    (package / "__pycache__" / "x.py").write_text("")
    (package / "panel" / "static" / "node_modules" / "y.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "z.py").write_text("")
    (package / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert _key(tmp_path) == before
    assert "panel/static/node_modules/y.py" not in _files(package)


def test_a_new_source_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path)
    (package / "tools" / "bash" / "more.py").write_text("")
    assert _key(tmp_path) != before
