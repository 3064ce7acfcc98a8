"""The build key (``tether.stamp``: the handshake cache's and the CLI door's) follows every source file
the kept answers could come from, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hang import HANG_S
from tether import ondisk, stamp


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "tether"
    (root / "tools" / "bash").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "bash" / "tools.py").write_text("DESCRIPTION = 'one'\n")
    (root / "__pycache__").mkdir()
    (root / "panel" / "static" / "node_modules").mkdir(parents=True)
    return root


def _key(home: Path, package: Path) -> str:
    return stamp.build_key(home, (), package_dir=package)


def _files(root: Path) -> list[str]:
    seen: list[str] = []
    ondisk.add_tree(lambda path, *_stamp: seen.append(path), root)
    return seen


def test_every_source_file_is_in_the_key_in_a_fixed_order(package: Path) -> None:
    assert _files(package) == ["__init__.py", "tools/__init__.py", "tools/bash/tools.py"]


def test_an_edited_nested_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path, package)
    assert _key(tmp_path, package) == before
    (package / "tools" / "bash" / "tools.py").write_text("DESCRIPTION = 'two, longer'\n")
    assert _key(tmp_path, package) != before


def test_a_touched_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path, package)
    target = package / "tools" / "__init__.py"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert _key(tmp_path, package) != before


def test_caches_vendored_code_and_linked_directories_are_left_out(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path, package)
    (package / "__pycache__" / "x.py").write_text("")
    (package / "panel" / "static" / "node_modules" / "y.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "z.py").write_text("")
    (package / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert _key(tmp_path, package) == before
    assert "panel/static/node_modules/y.py" not in _files(package)


def test_a_new_source_file_changes_the_key(package: Path, tmp_path: Path) -> None:
    before = _key(tmp_path, package)
    (package / "tools" / "bash" / "more.py").write_text("")
    assert _key(tmp_path, package) != before


def test_one_interpreter_by_either_name_gives_one_key(tmp_path: Path) -> None:
    """A venv's ``python`` and the ``python3`` its console scripts name are one interpreter: a
    command started either way finds the same tools process and handshake cache."""
    probe = (
        "import sys; from pathlib import Path; from tether import stamp; "
        "print(stamp.build_key(Path(sys.argv[1]), ()))"
    )
    keys = {
        subprocess.run(
            [str(Path(sys.executable).parent / name), "-c", probe, str(tmp_path)],
            capture_output=True, text=True, check=True, timeout=HANG_S,
        ).stdout
        for name in ("python", "python3")
    }  # fmt: skip
    assert len(keys) == 1 and len(keys.pop().strip()) == 64


def test_a_fifo_in_place_of_the_handshake_cache_is_ignored_not_waited_on(tmp_path: Path) -> None:
    # Reading it waited for a writer for ever: `tether mcp` never answered initialize.
    from tether.mcp.handshake import HandshakeCache

    cache = HandshakeCache(tmp_path, "k" * 64)
    cache.dir.mkdir()
    os.mkfifo(cache.path, 0o600)
    assert cache.load() is None
