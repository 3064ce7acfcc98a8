"""``tether.home.replace_file``: how tether replaces a file in its home (start-up files, keys,
snapshots, caches): at once, private, and nothing left behind when it fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tether.home import replace_file


def test_the_new_file_is_whole_private_and_the_only_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    replace_file(path, b"new" * 100_000, durable=True)
    assert path.read_bytes() == b"new" * 100_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_link_in_its_place_is_replaced_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"keep")
    path = tmp_path / "rc.bash"
    path.symlink_to(elsewhere)
    replace_file(path, b"mine")
    assert not path.is_symlink() and path.read_bytes() == b"mine"
    assert elsewhere.read_bytes() == b"keep"


def test_a_failure_raises_and_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "in-the-way"
    path.mkdir()  # the rename fails, as the write does on a full disk
    with pytest.raises(IsADirectoryError):
        replace_file(path, b"data")
    assert [p.name for p in tmp_path.iterdir()] == ["in-the-way"]
    assert list(path.iterdir()) == []
