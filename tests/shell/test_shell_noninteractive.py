"""Commands that would wait for a person finish (or fail) at once instead of at the timeout."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import threading
from pathlib import Path

import pytest

from hang import HANG_S
from tether.shell import LocalBashExecutor, LocalShellOptions, ShellExecRequest, ShellRunResult

# Generous: these must end on their own, far before it; timed_out=False is the assertion.
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repo")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i in range(60):  # more history than a screen: `git log` would page
        (path / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"commit {i}"], check=True)
    return path


async def _run(cwd: Path, command: str) -> ShellRunResult:
    executor = LocalBashExecutor(LocalShellOptions(cwd=str(cwd)))
    execution = await executor.execute(executor.resolve(ShellExecRequest(command, timeout_ms=TIMEOUT_MS)))
    return await asyncio.wait_for(execution.result(), HANG_S)


async def test_git_log_does_not_start_a_pager(repo: Path) -> None:
    result = await _run(repo, "git log")
    assert not result.timed_out and result.exit_code == 0
    assert "commit 0" in result.stdout.text


async def test_git_commit_without_message_does_not_open_an_editor(repo: Path) -> None:
    result = await _run(repo, "echo change >> f && git -c user.name=t -c user.email=t@example.com commit -a")
    assert not result.timed_out
    assert result.exit_code != 0  # empty message from the `true` editor: commit aborted
    assert "empty commit message" in result.stderr.text + result.stdout.text


class _AuthRequired(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_git_push_does_not_prompt_for_credentials(repo: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthRequired)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        result = await _run(repo, f"git push http://127.0.0.1:{port}/repo.git HEAD")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert not result.timed_out and result.exit_code != 0
    assert "terminal prompts disabled" in result.stderr.text


async def test_less_and_read_prompt_finish(tmp_path: Path) -> None:
    (tmp_path / "long.txt").write_text("line\n" * 5000)
    result = await _run(tmp_path, "less long.txt | wc -l; read -p 'name? ' name; echo status=$?")
    assert not result.timed_out
    assert result.stdout.text == "5000\nstatus=1\n"
