"""Repositories are protected wherever they are under the writable roots, through the MCP client:
nested ones, submodules and worktrees (``.git`` files: protect what they point to), and those the
command creates itself, whose hooks and program-running configuration are neutralised before the
result returns and reported as ``git`` denials. The proof is an unconfined ``git`` run afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sandbox_mcp_harness import bash, denials, link_hooks, server, text_of

pytestmark = pytest.mark.timeout(180)
HOOK = "#!/bin/sh\ntouch {marker}\n"


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home holding a project with a nested repository, a submodule and a linked worktree."""
    home = tmp_path / "home"
    lib = tmp_path / "lib"
    for repo in (home / "proj", home / "proj" / "sub", lib):
        repo.mkdir(parents=True)
        git("init", "-q", "-b", "main", cwd=repo)
        git("commit", "-q", "--allow-empty", "-m", "start", cwd=repo)
    git("submodule", "add", "-q", str(lib), "libs/mod", cwd=home / "proj")
    git("commit", "-q", "-m", "submodule", cwd=home / "proj")
    git("worktree", "add", "-q", str(home / "wt"), cwd=home / "proj")
    (home / "tools" / "bin").mkdir(parents=True)
    return home


def _unconfined_git_runs_no_hook(repo: Path, marker: Path) -> None:
    git("commit", "-q", "--allow-empty", "-m", "after the sandbox", cwd=repo)
    git("status", "--short", cwd=repo)
    assert not marker.exists(), f"an unconfined git in {repo} ran a planted hook"


def _text_of(path: Path) -> str:
    return path.read_text()


async def test_existing_nested_submodule_and_worktree_repositories_are_read_only(
    tether_home: Path, home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    modules = home / "proj/.git/modules/libs/mod"
    before = {p: _text_of(p) for p in (home / "proj/sub/.git/config", modules / "config", home / "wt/.git")}
    hook = HOOK.format(marker=marker).replace("\n", "\\n")
    attempts = [
        f"printf '{hook}' > proj/sub/.git/hooks/pre-commit",
        "echo '[core] hooksPath=/tmp' >> proj/sub/.git/config",
        f"printf '{hook}' > {modules}/hooks/pre-commit",
        "echo '[core] fsmonitor=evil' >> proj/libs/mod/../../.git/modules/libs/mod/config",
        "echo 'gitdir: ../evil' > wt/.git",
        "mv proj/.git proj/.git-old",
        # a nested git directory moved aside and rebuilt with a hook: the new one is neutralised
        "mv proj/sub/.git proj/sub/.git-old; mkdir -p proj/sub/.git/hooks",
        f"printf '{hook}' > proj/sub/.git/hooks/pre-commit",
        "chmod +x proj/sub/.git/hooks/pre-commit",
    ]
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(client, "; ".join(attempts) + "; echo benign > benign.txt")
    found = denials(data)
    for target in (
        home / "proj/sub/.git/hooks/pre-commit",
        home / "proj/sub/.git/config",
        modules / "hooks/pre-commit",
        modules / "config",
        home / "wt/.git",
        home / "proj/.git",
    ):
        assert ("write", str(target)) in found, (target, text)
    assert {p: _text_of(p) for p in before} == before
    assert (home / "benign.txt").read_text() == "benign\n"
    for repo in (home / "proj/sub", home / "proj/libs/mod", home / "wt"):
        _unconfined_git_runs_no_hook(repo, marker)


async def test_repositories_the_command_creates_are_neutralised_and_reported(
    tether_home: Path, home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    hook = HOOK.format(marker=marker).replace("\n", "\\n")
    commands = [
        # git init, then a hook and configuration that would run programs
        f"git init -q -b main new && printf '{hook}' > new/.git/hooks/pre-commit",
        "chmod +x new/.git/hooks/pre-commit",
        f"git -C new config core.hooksPath {tmp_path}/hooks",
        "git -C new config core.fsmonitor 'touch /tmp/x'",
        "git -C new config alias.st '!touch /tmp/x'",
        "git -C new config user.name 'the agent'",
        # an unfinished repository: a later `git init` by the user keeps a hook planted here
        f"mkdir -p half/.git/hooks && printf '{hook}' > half/.git/hooks/post-commit",
        "chmod +x half/.git/hooks/*",
        # a worktree-style .git file pointing at a git directory the command built
        "mkdir -p evil/objects evil/refs/heads evil/hooks wt2 && echo 'ref: refs/heads/main' > evil/HEAD",
        f"printf '{hook}' > evil/hooks/pre-commit && chmod +x evil/hooks/pre-commit",
        "printf '[core]\\n\\tpager = touch /tmp/x\\n' > evil/config && echo 'gitdir: ../evil' > wt2/.git",
        # configuration for an existing linked worktree that did not exist before
        "printf '[core]\\n\\tsshCommand = touch /tmp/x\\n' > proj/.git/worktrees/wt/config.worktree",
        "echo benign > benign.txt",
    ]
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(client, " ; ".join(commands))
    found = {target: detail for kind, target, detail in _git_denials(data)}
    new_git = home / "new/.git"
    assert "renamed to pre-commit.disabled-by-tether" in found[f"{new_git}/hooks/pre-commit"], text
    removed = found[f"{new_git}/config"]
    assert "core.hookspath" in removed and "core.fsmonitor" in removed and "alias.st" in removed
    assert "post-commit.disabled-by-tether" in found[f"{home}/half/.git/hooks/post-commit"]
    assert "pre-commit.disabled-by-tether" in found[f"{home}/evil/hooks/pre-commit"]
    assert "core.pager" in found[f"{home}/evil/config"]
    assert "core.sshcommand" in found[f"{home}/proj/.git/worktrees/wt/config.worktree"]
    # What stays is what git init wrote and the harmless keys; git still reads it.
    assert git("config", "--file", str(new_git / "config"), "user.name", cwd=home) == "the agent\n"
    assert "hookspath" not in (new_git / "config").read_text().lower()
    assert (home / "benign.txt").read_text() == "benign\n"
    git("init", "-q", cwd=home / "half")  # the user finishes the half-made repository
    for repo in (home / "new", home / "half", home / "wt2"):
        _unconfined_git_runs_no_hook(repo, marker)


def _git_denials(data: dict[str, object]) -> list[tuple[str, str, str]]:
    sandbox = data["sandbox"]
    assert isinstance(sandbox, dict)
    return [(d["kind"], d["target"], d["detail"]) for d in sandbox["denials"] if d["kind"] == "git"]


@pytest.fixture
def linked_hooks(home: Path) -> Path:
    """A project whose hooks live in the work tree, ``.git/hooks -> ../.githooks`` (a common set-up),
    and a nested repository whose ``config`` is a link too."""
    repo = home / "proj"
    link_hooks(repo)
    sub = repo / "sub" / ".git"
    (sub / "config").rename(sub / "config.real")
    (sub / "config").symlink_to("config.real")
    return repo


async def test_a_symlinked_hooks_directory_cannot_be_swapped_for_a_real_one(
    tether_home: Path, home: Path, linked_hooks: Path, tmp_path: Path
) -> None:
    """The read-only bind sits on the link's target (a mount follows links), so the link itself was
    a plain entry of the git directory: replaced by a real ``hooks`` with a ``pre-commit``, it had
    existed "before" and was never neutralised — the person's next ``git commit`` ran it unconfined.
    Now the link is put back before the result returns and what the command left is moved aside."""
    marker = tmp_path / "hook-ran"
    hook = HOOK.format(marker=marker).replace("\n", "\\n")
    attack = (
        f"rm .git/hooks && mkdir .git/hooks && printf '{hook}' > .git/hooks/pre-commit && "
        "chmod +x .git/hooks/pre-commit && echo hooks-swapped; "
        "rm sub/.git/config && printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > sub/.git/config "
        "&& echo config-swapped"
    ).format(marker=marker)
    async with server(tether_home, home / "proj", "--sandbox") as client:
        text, data = await bash(client, attack)
    assert "hooks-swapped" in text and "config-swapped" in text, text  # the links were plain entries
    _unconfined_git_runs_no_hook(linked_hooks, marker)
    _unconfined_git_runs_no_hook(linked_hooks / "sub", marker)
    assert (linked_hooks / ".git/hooks").readlink() == Path("../.githooks")
    assert (linked_hooks / "sub/.git/config").readlink() == Path("config.real")
    found = denials(data)
    assert ("write", str(linked_hooks / ".git/hooks")) in found, text
    assert ("write", str(linked_hooks / "sub/.git/config")) in found, text


async def test_a_hooks_path_in_the_work_tree_is_read_only(
    tether_home: Path, home: Path, tmp_path: Path
) -> None:
    """``core.hooksPath = .husky/_`` (husky) moves the hooks git runs into the work tree, where
    every command may write: a planted ``pre-commit`` ran at the person's next ``git commit``.
    The directory it names is protected like ``.git/hooks``, and the one above it pinned."""
    repo = home / "proj"
    (repo / ".husky" / "_").mkdir(parents=True)
    git("config", "core.hooksPath", ".husky/_", cwd=repo)
    marker = tmp_path / "hook-ran"
    hook = HOOK.format(marker=marker).replace("\n", "\\n")
    attempts = [
        f"printf '{hook}' > .husky/_/pre-commit; chmod +x .husky/_/pre-commit",
        f"mv .husky .husky-old; mkdir -p .husky/_ && printf '{hook}' > .husky/_/pre-commit",
        "chmod +x .husky/_/pre-commit",
        "echo benign > benign.txt",
    ]
    async with server(tether_home, repo, "--sandbox") as client:
        text, data = await bash(client, "; ".join(attempts))
    _unconfined_git_runs_no_hook(repo, marker)
    assert (repo / "benign.txt").read_text() == "benign\n"
    assert ("write", str(repo / ".husky/_/pre-commit")) in denials(data), text


async def test_a_working_directory_in_or_above_a_hooks_path_cannot_plant_a_hook(
    tether_home: Path, home: Path, tmp_path: Path
) -> None:
    """With ``.husky/_`` as ``core.hooksPath``, a working directory of ``.husky/_`` or ``.husky``
    lies below the work tree: the repository scan, which looks below the roots, never saw the git
    directory that names the hooks, so they were writable. The first is refused, the second keeps
    ``_`` read-only."""
    repo = home / "proj"
    (repo / ".husky" / "_").mkdir(parents=True)
    git("config", "core.hooksPath", ".husky/_", cwd=repo)
    marker = tmp_path / "hook-ran"
    hook = HOOK.format(marker=marker).replace("\n", "\\n")
    async with server(tether_home, home, "--sandbox") as client:
        inside = await client.call_tool(
            "bash",
            {
                "command": f"printf '{hook}' > pre-commit; chmod +x pre-commit",
                "description": "red team",
                "workdir": str(repo / ".husky/_"),
            },
        )
        assert inside.is_error and "a directory of git hooks" in text_of(inside), text_of(inside)
        text, data = await bash(
            client,
            f"printf '{hook}' > _/pre-commit; chmod +x _/pre-commit; "
            f"mv _ old; mkdir _ && printf '{hook}' > _/pre-commit && chmod +x _/pre-commit; echo x > fine",
            workdir=str(repo / ".husky"),
        )
    _unconfined_git_runs_no_hook(repo, marker)
    assert (repo / ".husky" / "fine").exists()
    assert ("write", str(repo / ".husky/_/pre-commit")) in denials(data), text
