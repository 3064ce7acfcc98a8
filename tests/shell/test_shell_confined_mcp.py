"""The escape matrix of a confined persistent shell, through the official MCP client, as root.

``tether mcp --sandbox`` with the user's ``$HOME`` as the working directory: ``shell_open`` +
``shell_run`` must be exactly as confined as one-shot ``bash``. Each attempt below fails with a
structured denial in the run's result (or, where the sandbox hides the target, simply finds
nothing), while a benign write in the workdir from the same shell succeeds.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sandbox_mcp_harness import link_hooks, open_task, params, plant, run_to_exit, server, tree

from hang import HANG_MS
from tether.shell.sandbox import SandboxSettings

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "tools" / "bin").mkdir(parents=True)  # a directory on the server's PATH
    (home / ".bashrc").write_text("# the user's bashrc\n")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".gitconfig").write_text("[user]\n\tname = the user\n")
    subprocess.run(["git", "init", "-q", str(home / "sub")], check=True)  # a nested repository
    return home


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _open(client: Client, **action: Any) -> str:
    return str((await open_task(client, **action))["shell"])


def _denied(out: dict[str, Any]) -> list[tuple[str, str]]:
    assert out["sandbox"] is not None and out["sandbox"]["permissions"] == "use_default", out
    return [(d["kind"], d["target"]) for d in out["sandbox"]["denials"]]


@contextlib.contextmanager
def _listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        sock.setblocking(False)
        yield sock
    finally:
        sock.close()


@contextlib.contextmanager
def _outside_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_a_confined_shell_cannot_step_around_the_sandbox(tether_home: Path, home: Path) -> None:
    env, secret_values = plant()
    protected = (home / ".bashrc", home / ".gitconfig", home / "sub" / ".git")
    before = {str(p): tree(p) if p.is_dir() else p.read_text() for p in protected}
    sock = tether_home / "tmux.sock"
    target = f"/etc/tether-confined-{secrets.token_hex(4)}"
    with _listener() as listener, _outside_process() as victim:
        async with server(tether_home, home, "--sandbox", extra_env=env) as client:
            shell = await _open(client)
            marker = secrets.token_hex(4)
            benign = await run_to_exit(client, shell, f"echo {marker} > benign.txt; cat benign.txt")
            assert marker in benign["lines"] and benign["exitCode"] == 0
            assert benign["sandbox"]["denials"] == []

            outside = await run_to_exit(
                client, shell, f"touch {target}; echo x >> ~/.bashrc; echo x > ~/.gitconfig"
            )
            assert ("write", target) in _denied(outside)
            assert ("write", str(home / ".bashrc")) in _denied(outside)
            assert "sandbox_permissions" in outside["sandbox"]["escalationHint"]

            state = await run_to_exit(
                client,
                shell,
                f"ls {tether_home}; echo x > {tether_home}/planted; echo home=$?; "
                f"tmux -S {sock} ls; echo tmux=$?; tmux ls; echo env=$?; "
                f"tmux -S {sock} new-window 'touch /etc/owned'; echo new=$?",
                past_guard=True,
            )
            assert "home=1" in state["lines"] and "tmux=1" in state["lines"] and "env=1" in state["lines"]
            assert "new=1" in state["lines"]
            assert ("write", f"{tether_home}/planted") in _denied(state)

            proc1 = await run_to_exit(client, shell, "touch /proc/1/root/etc/x; echo rc=$?")
            assert "rc=1" in proc1["lines"] and _denied(proc1)

            port = listener.getsockname()[1]
            net = await run_to_exit(client, shell, f"echo hi > /dev/tcp/127.0.0.1/{port}; echo net=$?")
            assert "net=1" in net["lines"]
            assert ("network", f"127.0.0.1:{port}") in _denied(net)

            repos = await run_to_exit(
                client,
                shell,
                "echo x > sub/.git/hooks/pre-commit; echo '[core] hooksPath=/tmp' >> sub/.git/config; "
                "mkdir -p new/.git/hooks && echo x > new/.git/hooks/pre-commit; true",
            )
            assert _denied(repos)

            kill = await run_to_exit(client, shell, f"kill -9 {victim.pid}; echo kill=$?")
            assert "kill=1" in kill["lines"]

            environ = await run_to_exit(
                client, shell, "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; echo read-all"
            )
            assert "read-all" in environ["lines"]
            seen = "\n".join(environ["lines"])
            assert [v for v in secret_values if v in seen] == []
        assert victim.poll() is None  # the process outside was never reached
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected to the host's loopback listener
    assert not _exists(target) and not _exists("/etc/owned")
    assert not (tether_home / "planted").exists()
    after = {str(p): tree(p) if p.is_dir() else p.read_text() for p in protected}
    assert after == before
    assert not (home / "new" / ".git" / "hooks" / "pre-commit").exists()
    assert (home / "benign.txt").read_text() == f"{marker}\n"


async def test_a_confined_shell_revived_by_an_unconfined_server_stays_confined(
    tether_home: Path, home: Path
) -> None:
    target = f"/etc/tether-revived-{secrets.token_hex(4)}"
    async with server(tether_home, home, "--sandbox") as client:
        old = await _open(client, label="build")
        close = {"target": {"sessions": old}, "action": {"kind": "close"}}
        closed = await client.call_tool("shell_manage", {"tasks": [close]})
        assert not closed.is_error
    # The same home served without --sandbox: reviving the old shell must not step out of it.
    async with server(tether_home, home) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", "from": old}}]})
        new = (opened.structured_content or {})["tasks"][0]["shell"]
        assert new != old
        out = await run_to_exit(client, new, f"touch {target}; echo rc=$?")
        assert "rc=1" in out["lines"] and ("write", target) in _denied(out)
        fresh = await _open(client)  # a new shell of this deployment is unconfined, as configured
        plain = await run_to_exit(client, fresh, "echo plain")
        assert plain["sandbox"] is None and "plain" in plain["lines"]
    assert not _exists(target)


async def test_a_confined_shells_program_is_idle_once_it_waits(tether_home: Path, home: Path) -> None:
    """``idle`` for text typed to a program in a confined shell reads the sandbox's processes: a REPL
    that computes before printing is answered after it printed, its ``exit()`` at the shell's prompt."""

    async def typed(shell: str, text: str, wait: dict[str, Any]) -> dict[str, Any]:
        task = {"target": {"sessions": shell}, "action": {"kind": "run", "command": text}, "wait": wait}
        result = await client.call_tool("shell_run", {"tasks": [task]})
        out: dict[str, Any] = (result.structured_content or {})["tasks"][0]
        return out

    idle = {"kind": "idle", "timeoutMs": HANG_MS}
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        started = await typed(shell, "python3 -q", {"kind": "match", "pattern": ">>> "})
        assert started["met"] is True, started
        answered = await typed(shell, "x = sum(range(3 * 10**7)); print('do' + 'ne')", idle)
        assert answered["met"] is True and "done" in answered["lines"], answered
        assert (await typed(shell, "exit()", idle))["met"] is True
        assert (await run_to_exit(client, shell, "echo back"))["lines"] == ["back"]


async def test_a_confined_shell_cannot_write_into_its_trace_directory(tether_home: Path, home: Path) -> None:
    # The trace directory (TETHER_HOME/sandbox/shells/ID/trace-*) was bound writable.
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        out = await run_to_exit(
            client,
            shell,
            "head -c 5M /dev/zero > /run/tether-sandbox/big; echo big=$?; ls -A /run/tether-sandbox; "
            "touch /etc/tether-after-trace",
        )
        traces = sorted(p.name for p in (tether_home / "sandbox" / "shells").glob("*/trace-*/*"))
    assert "big=1" in out["lines"] and "trace" in out["lines"], out
    assert traces == ["trace"]  # the FIFO alone
    denied = _denied(out)  # the tracer's FIFO still works on the read-only mount
    assert ("write", "/run/tether-sandbox/big") in denied and ("write", "/etc/tether-after-trace") in denied


async def test_a_relative_cwd_is_stored_absolute_for_every_later_process(
    tether_home: Path, home: Path
) -> None:
    # shell_open {"cwd": ".."} stored '..': a process started elsewhere that respawned the shell
    # resolved it against its own working directory, a different writable root.
    (home / "work").mkdir()
    first = params(tether_home, home, "--sandbox").model_copy(update={"cwd": str(home / "work")})
    async with Client(first) as client:
        shell = await _open(client, cwd="..")
        assert "v=" + str(home) in (await run_to_exit(client, shell, 'echo "v=$PWD"'))["lines"]
    elsewhere = params(tether_home, home, "--sandbox").model_copy(update={"cwd": str(home / "tools" / "bin")})
    async with Client(elsewhere) as client:
        manage = {"target": {"sessions": shell}, "action": {"kind": "respawn"}}
        respawned = (await client.call_tool("shell_manage", {"tasks": [manage]})).structured_content or {}
        assert respawned["tasks"][0]["ok"], respawned
        out = await run_to_exit(client, shell, 'echo "v=$PWD"; touch made-here; echo rc=$?')
        await client.call_tool("shell_manage", {"tasks": [{**manage, "action": {"kind": "close"}}]})
    assert "v=" + str(home) in out["lines"] and "rc=0" in out["lines"], out
    assert (home / "made-here").exists() and not (home / "tools" / "made-here").exists()


async def test_tmux_socket_path_is_not_in_the_sandboxs_environment(tether_home: Path, home: Path) -> None:
    # bubblewrap (the sandbox's pid 1) inherited the pane's TMUX and TMUX_PANE: tmux's socket path.
    # Nor the mark of tether's own processes, which the tmux server carries (a process of the shell
    # holding it would be spared when the shell ends).
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        out = await run_to_exit(
            client,
            shell,
            "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done "
            "| grep -cE '^(TMUX|TMUX_PANE|TETHER_DAEMON)='; "
            "echo pid1=$(wc -c < /proc/1/environ)",
        )
    assert out["lines"][:1] == ["0"] and out["lines"][1] != "pid1=0", out  # read, and nothing of tmux's
    assert str(tether_home) not in "\n".join(out["lines"])


async def test_a_file_wait_looks_at_the_path_as_the_confined_shell_sees_it(
    tether_home: Path, home: Path
) -> None:
    # The wait was checked on the host: a file in the shell's private /tmp never met it, and a
    # hidden path (TETHER_HOME/tether.db) that the shell cannot see met it (an existence oracle).
    db = tether_home / "tether.db"
    private = f"/tmp/tether-inside-{secrets.token_hex(4)}"
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        assert db.exists()
        # An absolute link to the hidden file, in the shell's writable root, then into a subdirectory.
        await run_to_exit(client, shell, f"ln -s {db} db-link; ln -s ../db-link chain; mkdir -p sub; cd sub")

        async def met(path: str, command: str = "sleep 0.3") -> bool:
            wait = {"kind": "file", "path": path, "timeoutMs": 2000}
            task = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": command},
                "wait": wait,
            }
            result = await client.call_tool("shell_run", {"tasks": [task]})
            return bool((result.structured_content or {})["tasks"][0]["met"])

        made_inside = await met(private, f"sleep 0.2; touch {private}")
        relative = await met("made-in-sub", "sleep 0.2; touch made-in-sub")  # the shell's cwd: sub
        hidden = [await met(p) for p in (str(db), str(home / "db-link"), "../chain", "~/db-link")]
        linked_in = await met("../sub/made-in-sub")  # a relative walk that stays inside
    assert (made_inside, relative, linked_in, hidden) == (True, True, True, [False, False, False, False])
    assert not _exists(private) and (home / "sub" / "made-in-sub").exists()


def _sizes(lines: list[str]) -> dict[str, int]:
    """``df -B1 --output=size,target`` lines: each mount's size in bytes."""
    return {f[1]: int(f[0]) for f in (line.split() for line in lines) if len(f) == 2 and f[0].isdigit()}


async def test_a_confined_shell_cannot_fill_memory_through_its_own_tmpfs(
    tether_home: Path, home: Path
) -> None:
    """A shell's private /tmp, /run and bubblewrap's /dev live as long as the shell, in memory no
    process owns (the OOM killer cannot take it back). Unsized, each held half the machine's RAM;
    now each writable one is bounded by ``[sandbox].tmpfs_size_mb`` (1 GiB by default) and /dev
    itself is read-only."""
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        out = await run_to_exit(
            client,
            shell,
            "df -B1 --output=size,target /tmp /run /dev/shm; echo x > /dev/planted; echo dev=$?",
            past_guard=True,
        )
    sizes = _sizes(out["lines"])
    assert set(sizes) == {"/tmp", "/run", "/dev/shm"}, out["lines"]
    assert all(size <= 1 << 30 for size in sizes.values()), sizes
    assert "dev=1" in out["lines"] and ("write", "/dev/planted") in _denied(out)


async def test_what_a_confined_shell_stores_in_memory_stops_at_the_configured_size(
    tether_home: Path, home: Path
) -> None:
    """Writing past ``[sandbox].tmpfs_size_mb`` fails (ENOSPC) in /tmp, /dev/shm and /run alike."""
    (tether_home / "config.toml").write_text("[sandbox]\ntmpfs_size_mb = 2\n")
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        out = await run_to_exit(
            client,
            shell,
            "for d in /tmp /dev/shm /run; do head -c 8M /dev/zero > $d/fill; echo $d=$?; done; "
            "du -sk /tmp/fill /dev/shm/fill /run/fill",
            past_guard=True,
        )
    lines = out["lines"]
    assert {"/tmp=1", "/dev/shm=1", "/run=1"} <= set(lines), lines
    assert any("No space left on device" in line for line in lines), lines
    kib = [int(f[0]) for f in (line.split() for line in lines) if len(f) == 2 and f[1].endswith("/fill")]
    assert len(kib) == 3 and all(k <= 2048 for k in kib), lines


async def test_shell_state_says_how_each_shell_is_confined(tether_home: Path, home: Path) -> None:
    """An agent choosing a shell must not take an unconfined one for confined, nor believe ``cd``
    widened its writable area: ``shell_state`` (text and structure) and ``shell_open`` name each
    shell's mode, where it may write and its network, from its record."""
    async with server(tether_home, home) as client:  # a deployment that did not confine
        plain = await _open(client, label="plain")
    (tether_home / "config.toml").write_text('[sandbox]\nallow_escalations = ["allow_network"]\n')
    # What each confined shell may take (tether.process.bounds), or what is not bounded here.
    bounds = SandboxSettings.from_table({}).bounds_text()
    async with server(tether_home, home, "--sandbox") as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        task = (opened.structured_content or {})["tasks"][0]
        default = task["shell"]
        assert f"[sandbox: use_default: writable {home}; network off; {bounds}]" in task["lines"], task
        network = await _open(client, sandbox_permissions="allow_network", justification="fetch a fixture")
        await run_to_exit(client, default, "cd /usr")  # where the shell stands is not where it may write
        state = await client.call_tool("shell_state", {"scope": "*"})
        rows = {row["shell"]: row for row in (state.structured_content or {})["shells"]}
        text = "".join(getattr(block, "text", "") for block in state.content)
    assert rows[default]["cwd"] == "/usr"
    assert rows[default]["sandbox"] == f"use_default: writable {home}; network off; {bounds}", rows[default]
    assert rows[network]["sandbox"] == (
        f"allow_network: writable {home}; network allowed (granted by configuration); {bounds}"
    ), rows[network]
    assert rows[plain]["sandbox"] == "unconfined (opened by a tether process that did not confine)"
    assert (
        f"cwd=/usr · last=`cd /usr` exit=0 by red-team · sandbox=use_default: writable {home}; network off; "
        f"{bounds}" in text
    )
    assert f"{plain} · plain" in text and "sandbox=unconfined" in text, text


async def test_a_confined_shell_cannot_swap_a_symlinked_hooks_directory(
    tether_home: Path, home: Path
) -> None:
    """``.git/hooks -> ../.githooks``: the read-only bind sits on the target, so the link is a plain
    entry; a real ``hooks`` made in its place must never reach the person's unconfined ``git``."""
    repo = home / "sub"
    link_hooks(repo)
    marker = home / "hook-ran"
    async with server(tether_home, home, "--sandbox") as client:
        shell = await _open(client)
        await run_to_exit(
            client,
            shell,
            f"mkdir sub/.git/new; echo 'touch {marker}' > sub/.git/new/pre-commit; "
            "chmod +x sub/.git/new/pre-commit; rm sub/.git/hooks; mv sub/.git/new sub/.git/hooks; true",
            past_guard=True,
        )
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    await anyio.run_process([*git, "commit", "-q", "--allow-empty", "-m", "after"], check=True)
    assert not marker.exists(), "an unconfined git ran a hook the confined shell planted"
    assert (repo / ".git" / "hooks").readlink() == Path("../.githooks")
