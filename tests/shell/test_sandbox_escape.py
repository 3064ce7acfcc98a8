"""The escape matrix: real bubblewrap, real processes. Every attempt fails with a structured denial
while a benign write in the working directory, in the same command, succeeds.

Tests run as root here, so "read-only" is checked against root: the sandbox drops every
capability, and read-only bind mounts refuse root too (``EROFS``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from pathlib import Path

import psutil
import pytest
from sandbox_harness import Box, loopback_listener, make_box, pending_connection, run

from proc_probe import alive_with, unique_sleep_arg, wait_until
from tether.shell import ShellExecRequest, ShellRunResult
from tether.shell.render import render_shell_result

# The interpreter's own file, not the venv's ``bin/python`` symlink: a checkout under /tmp (a fresh
# clone there) has its venv in the host's /tmp, which the sandbox replaces with a private tmpfs.
SANDBOX_PYTHON = os.path.realpath(sys.executable)


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    return make_box(tmp_path, monkeypatch)


def _kinds(result: ShellRunResult) -> list[tuple[str, str]]:
    assert result.sandbox is not None
    return [(d.kind, d.target) for d in result.sandbox.denials]


def _leftovers(box: Box) -> list[str]:
    return sorted(p.name for p in (box.home / "sandbox").glob("run-*"))


def _host_file(path: str) -> str | None:
    """The host's view of ``path`` (None when it does not exist)."""
    return Path(path).read_text() if os.path.exists(path) else None


async def _attempt(box: Box, attempt: str) -> ShellRunResult:
    result = await run(box.executor(), f"{attempt}; echo benign > benign.txt")
    assert (box.work / "benign.txt").read_text() == "benign\n", render_shell_result(result)
    assert result.sandbox is not None and result.sandbox.provider == "bubblewrap"
    assert result.sandbox.permissions == "use_default"
    return result


async def test_benign_writes_succeed_and_report_no_denial(box: Box) -> None:
    # A name nothing on the host holds (a fixed one may be anyone's file or directory).
    scratch = f"/tmp/tether-sandbox-tmp-{secrets.token_hex(8)}"
    result = await run(box.executor(), f"echo hi > made.txt && mkdir -p sub && echo t > {scratch} && id -u")
    assert result.exit_code == 0, render_shell_result(result)
    assert result.stdout.text == "0\n"  # root inside the sandbox, and still confined
    assert (box.work / "made.txt").read_text() == "hi\n" and (box.work / "sub").is_dir()
    assert result.sandbox is not None and result.sandbox.denials == ()
    assert "[sandbox" not in render_shell_result(result)
    assert _host_file(scratch) is None  # the sandbox's /tmp is its own
    assert _leftovers(box) == []  # the run's trace directory is gone


async def test_startup_file_in_a_writable_home_is_protected(box: Box) -> None:
    result = await _attempt(box, "echo evil >> ~/.bashrc")
    assert ("write", str(box.user / ".bashrc")) in _kinds(result)
    assert (box.user / ".bashrc").read_text() == "original\n"
    text = render_shell_result(result)
    assert f"[sandbox denied: write {box.user}/.bashrc]" in text
    assert 'sandbox_permissions="require_escalated"' in text


async def test_an_absent_startup_file_cannot_be_created(box: Box) -> None:
    result = await _attempt(box, "echo evil > ~/.profile")
    assert ("write", str(box.user / ".profile")) in _kinds(result)
    assert not (box.user / ".profile").exists()  # the read-only placeholder is gone again


async def test_git_hooks_and_config_are_protected(box: Box) -> None:
    result = await _attempt(
        box, "echo evil > .git/hooks/pre-commit; echo evil >> .git/config; mv .git .moved; rm -rf .git/hooks"
    )
    kinds = _kinds(result)
    assert ("write", str(box.work / ".git/hooks/pre-commit")) in kinds
    assert ("write", str(box.work / ".git/config")) in kinds
    assert ("write", str(box.work / ".git")) in kinds  # EBUSY: a pinned mount point
    assert not (box.work / ".git/hooks/pre-commit").exists()
    assert (box.work / ".git/config").read_text() == "[core]\n"
    assert not (box.work / ".moved").exists() and (box.work / ".git/hooks").is_dir()


async def test_writes_outside_the_roots_are_denied(box: Box) -> None:
    outside = box.base / "outside.txt"
    result = await _attempt(box, f"echo evil > {outside}; touch /usr/tether-sandbox-test")
    kinds = _kinds(result)
    assert not outside.exists()  # /tmp is private: the write landed in the sandbox's own tmpfs
    assert ("write", "/usr/tether-sandbox-test") in kinds
    assert _host_file("/usr/tether-sandbox-test") is None
    assert 'sandbox_permissions="allow_host_write"' in render_shell_result(result)


async def test_a_symlink_into_a_protected_path_does_not_help(box: Box) -> None:
    result = await _attempt(box, f"ln -s {box.user}/.bashrc innocent && echo evil > innocent")
    assert result.sandbox is not None
    denial = next(d for d in result.sandbox.denials if d.target == str(box.user / ".bashrc"))
    assert denial.kind == "write" and f"through {box.work}/innocent" in denial.detail
    assert (box.user / ".bashrc").read_text() == "original\n"


async def test_tether_home_is_hidden_and_read_only(box: Box) -> None:
    result = await _attempt(box, 'ls -A "$TETHER_HOME"; echo x > "$TETHER_HOME/config.toml"')
    assert result.stdout.text == ""  # config.toml, audit/ … are not even visible
    assert ("write", str(box.home / "config.toml")) in _kinds(result)
    assert (box.home / "config.toml").read_text() == ""


async def test_bash_dev_tcp_to_a_host_listener_is_denied(box: Box) -> None:
    with loopback_listener() as listener:
        port = listener.getsockname()[1]
        result = await _attempt(box, f'echo hi > /dev/tcp/127.0.0.1/{port}; echo "connect exited $?"')
        assert result.stdout.text == "connect exited 1\n", render_shell_result(result)
        assert ("network", f"127.0.0.1:{port}") in _kinds(result)
        assert not pending_connection(listener)
    assert 'sandbox_permissions="allow_network"' in render_shell_result(result)


async def test_python_socket_connect_is_denied_even_when_it_prints_nothing(box: Box) -> None:
    with loopback_listener() as listener:
        port = listener.getsockname()[1]
        script = (
            f"import socket; print('connecting', flush=True); "
            f"socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        )
        result = await _attempt(box, f'{SANDBOX_PYTHON} -c "{script}" 2>/dev/null; echo "python exited $?"')
        # Proof that the interpreter ran and its connect failed: a command that could not start
        # (also silenced by 2>/dev/null) would otherwise look exactly like "no denial".
        assert result.stdout.text == "connecting\npython exited 1\n", (
            f"{SANDBOX_PYTHON} must be visible inside the sandbox (its /tmp is private)\n"
            + render_shell_result(result)
        )
        assert ("network", f"127.0.0.1:{port}") in _kinds(result)
        assert result.stderr.text == ""  # the denial came from the process, not from its messages
        assert not pending_connection(listener)


async def test_new_namespaces_and_remounts_are_denied(box: Box) -> None:
    result = await _attempt(box, "unshare -n true; mount -o remount,rw /")
    kinds = _kinds(result)
    assert ("namespace", "CLONE_NEWNET") in kinds
    assert any(kind == "mount" for kind, _ in kinds)


async def test_processes_outside_the_sandbox_cannot_be_signalled(box: Box) -> None:
    victim = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        result = await _attempt(box, f"kill -KILL {victim.pid}")
        assert ("signal", f"pid {victim.pid}") in _kinds(result)
        assert psutil.Process(victim.pid).status() != psutil.STATUS_ZOMBIE  # still alive
    finally:
        victim.kill()
        await victim.wait()


async def test_nothing_started_in_the_sandbox_outlives_the_command(box: Box) -> None:
    token = unique_sleep_arg()
    result = await run(box.executor(), f"sleep {token} & setsid sleep {token} & echo started")
    assert result.stdout.text == "started\n" and result.exit_code == 0
    assert alive_with(token) == []  # the PID namespace ended with the shell, tracer included


async def test_a_timeout_kills_the_sandboxed_tree(box: Box) -> None:
    token = unique_sleep_arg()
    executor = box.executor()
    spec = executor.resolve(ShellExecRequest(f"sleep {token}", timeout_ms=300))
    result = await (await executor.execute(spec)).result()
    assert result.timed_out
    assert wait_until(lambda: alive_with(token) == [])


async def test_hidden_paths_are_empty_inside(box: Box) -> None:
    secrets = box.user / ".ssh"
    secrets.mkdir()
    (secrets / "id_ed25519").write_text("PRIVATE KEY\n")
    token = box.user / "token.txt"
    token.write_text("sekrit\n")
    executor = box.executor(hidden_paths=(str(secrets), str(token)))
    result = await run(executor, f"ls -A {secrets}; cat {token}; echo x > {secrets}/new")
    assert result.stdout.text == ""
    assert ("write", str(secrets / "new")) in _kinds(result)
    assert sorted(p.name for p in secrets.iterdir()) == ["id_ed25519"]


async def test_without_the_tracer_denials_come_from_stderr(box: Box) -> None:
    result = await run(box.executor(trace=False), "echo x > /usr/tether-untraced; echo ok > fine.txt")
    assert (box.work / "fine.txt").read_text() == "ok\n"
    assert _kinds(result) == [("write", "/usr/tether-untraced")]
    assert result.sandbox is not None and result.sandbox.denials[0].detail.startswith("from stderr")


async def test_a_tracer_that_cannot_run_here_degrades_to_stderr(box: Box) -> None:
    broken = box.work / "strace"
    broken.write_text(
        "#!/bin/sh\necho 'strace: ptrace(PTRACE_TRACEME): Operation not permitted' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    executor = box.executor()
    executor.sandbox.strace = str(broken)
    result = await run(executor, "echo x > /usr/tether-untraced; echo ran")
    assert result.stdout.text == "ran\n"  # the command still ran, confined
    assert executor.sandbox.strace is None
    assert _kinds(result) == [("write", "/usr/tether-untraced")]


async def test_failed_lookups_are_filtered_and_a_late_denial_still_arrives(box: Box) -> None:
    noisy = "for i in $(seq 1 5000); do : < /nonexistent/$i; done 2>/dev/null; echo x > /usr/tether-late"
    result = await run(box.executor(), noisy)
    assert _kinds(result) == [("write", "/usr/tether-late")]
    assert _leftovers(box) == []


async def test_the_trace_directory_is_read_only_and_the_trace_still_arrives(box: Box) -> None:
    # It was bound writable: a command could store any amount in TETHER_HOME/sandbox, unreported.
    result = await _attempt(
        box,
        "head -c 5M /dev/zero > /run/tether-sandbox/big; echo big=$?; mkdir /run/tether-sandbox/d; "
        "echo dir=$?; ls -A /run/tether-sandbox; touch /usr/tether-after-trace",
    )
    assert result.stdout.text == "big=1\ndir=1\ntrace\n", render_shell_result(result)
    kinds = _kinds(result)  # the tracer's FIFO works on the read-only mount: denials still arrive
    assert ("write", "/run/tether-sandbox/big") in kinds and ("write", "/usr/tether-after-trace") in kinds
    assert _leftovers(box) == []


async def test_a_relative_denied_path_is_never_placed_in_the_servers_directory(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `cd /etc && mkdir q` was reported as `<the server's working directory>/q`.
    monkeypatch.chdir(box.base)
    result = await _attempt(box, "(cd /etc && mkdir tether-q); (cd /usr && touch tether-t)")
    denials = {d.target: d.detail for d in result.sandbox.denials} if result.sandbox else {}
    # mkdir(2) takes no directory descriptor: strace cannot say where it ran, so it stays relative.
    relative = "EROFS: relative to the directory the call ran in, which the trace does not show"
    assert denials.get("tether-q") == relative, denials
    # openat(AT_FDCWD</usr>, …): strace names the directory, so the path is placed exactly.
    assert "/usr/tether-t" in denials, denials
    assert not any(target.startswith(str(box.base)) for target in denials), denials
    text = render_shell_result(result)
    assert "[sandbox denied: write tether-q (relative), write /usr/tether-t]" in text
    assert 'sandbox_permissions="allow_host_write"' in text and "cannot be judged" in text
    only_relative = await _attempt(box, "(cd /etc && mkdir tether-q)")
    hint = only_relative.sandbox.escalation_hint if only_relative.sandbox else None
    assert hint is not None and "sandbox_permissions=" not in hint and "cannot be judged" in hint, hint
