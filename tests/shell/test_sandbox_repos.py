"""The repository index (what counts as a git directory, what a refresh re-lists) and the
neutraliser (what it rewrites, renames, and never touches), on real directories, without bubblewrap."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tether.shell.sandbox import repos
from tether.shell.sandbox.git import neutralise, parse_config, render_config, safe_entry
from tether.shell.sandbox.repos import RepositoryIndex, RepositoryScanTooLarge, RepoSnapshot


def _snapshot(index: RepositoryIndex) -> RepoSnapshot:
    return index.snapshot(include_target=lambda path: path.startswith(index.root))


def test_every_kind_of_git_directory_is_found(tmp_path: Path) -> None:
    (tmp_path / "a/b/c/deep/.git/hooks").mkdir(parents=True)  # unfinished, nested deep
    bare = tmp_path / "bare.git"
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt/.git").write_text("gitdir: ../pointed\n")  # the target does not exist yet
    linked = tmp_path / "main/.git/worktrees/x"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("0" * 40 + "\n")
    (linked / "commondir").write_text("../../../../common\n")
    (tmp_path / "main/.git/modules/sub/objects").mkdir(parents=True)  # an absorbed submodule
    (tmp_path / "main/.git/modules/sub/HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "hidden/.git").mkdir(parents=True)
    index = RepositoryIndex(str(tmp_path), excluded=frozenset({str(tmp_path / "hidden")}))
    found = _snapshot(index)
    assert set(found.gitdirs) == {
        f"{tmp_path}/a/b/c/deep/.git",
        str(bare),
        f"{tmp_path}/pointed",
        f"{tmp_path}/main/.git",
        str(linked),
        f"{tmp_path}/common",
        f"{tmp_path}/main/.git/modules/sub",
    }
    assert found.pointers == (f"{tmp_path}/wt/.git",)
    deep = found.gitdirs[f"{tmp_path}/a/b/c/deep/.git"]
    assert deep.control["hooks"] is not None and deep.control["config"] is None
    assert found.gitdirs[f"{tmp_path}/pointed"].ident is None
    assert (
        f"{tmp_path}/a/b/c/deep/.git/hooks" in found.read_only()
        and f"{tmp_path}/wt/.git" in found.read_only()
    )


def test_a_refresh_lists_only_what_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("one/x", "two/y", "three/z"):
        (tmp_path / name).mkdir(parents=True)
    listed: list[str] = []
    real_scandir = os.scandir

    def counting(path: str) -> object:
        listed.append(path)
        return real_scandir(path)

    index = RepositoryIndex(str(tmp_path), excluded=frozenset())
    monkeypatch.setattr(repos.os, "scandir", counting)
    index.refresh()
    assert len(listed) == 7
    # Pretend every listing is old enough that a change in the same clock tick is ruled out.
    monkeypatch.setattr(repos, "CTIME_MARGIN_NS", -(1 << 62))
    listed.clear()
    index.refresh()
    assert listed == []
    (tmp_path / "two/y/new/.git").mkdir(parents=True)
    index.refresh()
    assert listed == [f"{tmp_path}/two/y", f"{tmp_path}/two/y/new", f"{tmp_path}/two/y/new/.git"]
    assert f"{tmp_path}/two/y/new/.git" in _snapshot(index).gitdirs


def test_a_change_in_the_same_clock_tick_is_still_seen(tmp_path: Path) -> None:
    index = RepositoryIndex(str(tmp_path), excluded=frozenset())
    index.refresh()
    (tmp_path / "fresh/.git").mkdir(parents=True)  # right after the listing: ctime may not move
    assert f"{tmp_path}/fresh/.git" in _snapshot(index).gitdirs


def test_a_tree_too_large_to_follow_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(8):
        (tmp_path / f"d{index}").mkdir()
    monkeypatch.setattr(repos, "MAX_DIRECTORIES", 5)
    with pytest.raises(RepositoryScanTooLarge, match="run the command in a project directory"):
        RepositoryIndex(str(tmp_path), excluded=frozenset()).refresh()


def test_configuration_round_trips_through_git() -> None:
    entries: list[tuple[str, str | None]] = [
        ("core.bare", "false"),
        ('remote.o "quoted".url', 'https://h/x "y"\\z'),
        ("branch.Main.merge", "refs/heads/Main"),
        ("user.name", "tab\there\nnewline"),
    ]
    assert parse_config(render_config(entries)) == entries
    assert parse_config(b"[unterminated\n") is None


@pytest.mark.parametrize(
    ("key", "value", "safe"),
    [
        ("core.repositoryformatversion", "0", True),
        ("core.hookspath", "/x", False),
        ("core.fsmonitor", "evil", False),
        ("core.sshcommand", "evil", False),
        ("core.pager", "evil", False),
        ("include.path", "../evil", False),
        ("includeif.gitdir:/.path", "x", False),
        ("alias.st", "!evil", False),
        ("filter.lfs.smudge", "evil", False),
        ("diff.x.textconv", "evil", False),
        ("credential.helper", "!evil", False),
        ("url.ext::sh -c evil.insteadof", "https://", False),
        ("remote.origin.url", "https://example.com/x.git", True),
        ("remote.origin.url", "ext::sh -c evil", False),
        ("remote.origin.uploadpack", "evil", False),
        ("submodule.m.update", "!evil", False),
        ("submodule.m.update", "rebase", True),
        ("extensions.worktreeconfig", "true", True),
    ],
)
def test_only_keys_that_run_nothing_survive(key: str, value: str, safe: bool) -> None:
    assert safe_entry(key, value) is safe


def _git_dir(path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)


def test_neutralising_touches_only_what_is_new_and_never_follows_a_link(tmp_path: Path) -> None:
    old, new = tmp_path / "old.git", tmp_path / "new.git"
    _git_dir(old)
    (old / "hooks/pre-commit").write_text("#!/bin/sh\n")  # the user's: there before the command
    index = RepositoryIndex(str(tmp_path), excluded=frozenset())
    before = _snapshot(index)
    _git_dir(new)
    victim = tmp_path / "outside.txt"
    victim.write_text("[core]\n\tpager = keep me\n")
    (new / "config").unlink()
    (new / "config").symlink_to(victim)  # a config that is a link: moved aside, never followed
    (new / "hooks/post-checkout").write_text("#!/bin/sh\n")
    (new / "hooks/post-checkout").chmod(0o755)
    (old / "config.worktree").write_text("[core]\n\thooksPath = /x\n\tbare = false\n")
    found = {(d.target, d.detail) for d in neutralise(before, _snapshot(index))}
    assert found == {
        (f"{new}/config", "not a regular file: renamed to config.disabled-by-tether"),
        (f"{new}/hooks/post-checkout", "hook disabled: renamed to post-checkout.disabled-by-tether"),
        (
            f"{old}/config.worktree",
            "configuration removed (git would have obeyed it unconfined): core.hookspath",
        ),
    }
    assert victim.read_text() == "[core]\n\tpager = keep me\n"
    assert not os.access(new / "hooks/post-checkout.disabled-by-tether", os.X_OK)
    assert (old / "hooks/pre-commit").read_text() == "#!/bin/sh\n"
    assert (old / "config.worktree").read_text() == '[core]\n\tbare = "false"\n'
    assert neutralise(before, _snapshot(index)) == ()  # idempotent: nothing left to undo


def test_a_directory_swapped_for_a_link_is_reported_not_followed(tmp_path: Path) -> None:
    index = RepositoryIndex(str(tmp_path / "root"), excluded=frozenset())
    (tmp_path / "root").mkdir()
    before = _snapshot(index)
    _git_dir(tmp_path / "root/x.git")
    after = _snapshot(index)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "hooks").mkdir()
    (target / "hooks/keep").write_text("not yours\n")
    (tmp_path / "root/x.git").rename(tmp_path / "moved.git")
    (tmp_path / "root/x.git").symlink_to(target)
    found = neutralise(before, after)
    assert found and all("could not be checked" in d.detail for d in found)
    assert (target / "hooks/keep").read_text() == "not yours\n"


@pytest.mark.parametrize(
    ("config", "found"),
    [
        ("[core]\n\thooksPath = .husky/_\n", ".husky/_"),
        ('[CORE]\n  HooksPath="hooks-dir" # shared\n', "hooks-dir"),
        ("[core] hookspath = hooks-dir\n", "hooks-dir"),
        ("[user]\n\thooksPath = hooks-dir\n", None),  # not core's
        ("[core]\n\thooksPath = absent\n", None),  # nothing to bind: see docs/sandbox.md Limits
    ],
)
def test_the_hooks_path_git_obeys_is_protected_with_the_control_files(
    tmp_path: Path, config: str, found: str | None
) -> None:
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / ".husky" / "_").mkdir(parents=True)
    (work / "hooks-dir").mkdir()
    with (work / ".git" / "config").open("a") as out:
        out.write(config)
    snapshot = _snapshot(RepositoryIndex(str(tmp_path), excluded=frozenset()))
    state = snapshot.gitdirs[f"{work}/.git"]
    expected = str(work / found) if found is not None else None
    assert state.hooks_path == expected
    assert expected is None or expected in snapshot.read_only()
    assert RepoSnapshot.from_json(snapshot.to_json()) == snapshot
