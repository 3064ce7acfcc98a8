"""Commands that would wait for a person finish (or fail) at once instead of at the timeout."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from tether.shell import LocalBashExecutor, LocalShellOptions, ShellExecRequest, ShellRunResult

# Generous: these must end on their own, far before it; timed_out=False is the assertion.
TIMEOUT_MS = 30_000


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i in range(200):  # more history than a screen: `git log` would page
        (path / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"commit {i}"], check=True)
    return path


async def _run(cwd: Path, command: str) -> ShellRunResult:
    executor = LocalBashExecutor(LocalShellOptions(cwd=str(cwd)))
    execution = await executor.execute(
        executor.resolve(ShellExecRequest(command=command, timeout_ms=TIMEOUT_MS))
    )
    return await asyncio.wait_for(execution.result(), 60)


async def test_git_log_does_not_start_a_pager(repo: Path) -> None:
    result = await _run(repo, "git log")
    assert not result.timed_out and result.exit_code == 0
    assert "commit 0" in result.stdout.text


async def test_git_commit_without_message_does_not_open_an_editor(repo: Path) -> None:
    result = await _run(repo, "echo change >> f && git -c user.name=t -c user.email=t@example.com commit -a")
    assert not result.timed_out
    assert result.exit_code != 0  # empty message from the `true` editor: commit aborted
    assert "empty commit message" in result.stderr.text + result.stdout.text


async def test_git_push_does_not_prompt_for_credentials(repo: Path) -> None:
    result = await _run(repo, "git push http://127.0.0.1:9/nothing.git HEAD")
    assert not result.timed_out and result.exit_code != 0


async def test_less_and_read_prompt_finish(tmp_path: Path) -> None:
    (tmp_path / "long.txt").write_text("line\n" * 5000)
    result = await _run(tmp_path, "less long.txt | wc -l; read -p 'name? ' name; echo status=$?")
    assert not result.timed_out
    assert result.stdout.text == "5000\nstatus=1\n"
