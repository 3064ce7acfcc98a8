"""The branch ``shell_state`` shows for a shell's directory: asked of ``git`` with a 5 s limit, and
a git that does not answer in time (a lock, a slow disk) is ended and collected with the question."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from tether.config import load_config
from tether.shells.hosts.local import LocalHost


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    return tmp_path


async def test_the_branch_of_a_repository(tether_home: Path, repo: Path) -> None:
    host = LocalHost(load_config(tether_home))
    assert await host.git_branch(str(repo)) == "trunk"
    assert await host.git_branch("/") is None  # not a repository


async def test_a_git_that_hangs_is_ended_with_the_question(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "git.pid"
    (bin_dir / "git").write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    host = LocalHost(load_config(tether_home))
    with anyio.fail_after(HANG_S):
        assert await host.git_branch(str(tmp_path)) is None
    # The stuck git was killed and collected before the answer came back: nothing runs on.
    assert _gone(int(pid_file.read_bytes()))
