"""``confine_interactive``: a real interactive bash in a tmux pane, confined like a one-shot command.

The escape matrix runs inside that pane: each attempt fails while a benign write in the working
directory succeeds, the shell keeps job control, and a repository it creates is neutralised by
``check_repositories()``. Synchronisation is a FIFO the pane writes when it is done (no sleeps).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.shell import ConfinedShell, ExtraBind, SandboxSettings, confine_interactive
from tether.shell.sandbox.interactive import _tracer_check

pytestmark = pytest.mark.timeout(120)
SYSCTL = Path("/proc/sys/kernel/printk_ratelimit")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work / "sub")], check=True)
    (work / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(work))  # the shell's home is a writable root
    os.mkfifo(work / "done.fifo")
    return work


def _wait_for_line(fifo: Path, timeout_s: float = 60) -> str:
    """The first line written to ``fifo``; a write end of our own keeps it from reading as EOF."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keepalive = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([reader], [], [], timeout_s)
            assert ready, "the confined shell never reported back"
            data += os.read(reader, 4096)
        return data.decode()
    finally:
        os.close(reader)
        os.close(keepalive)


@contextlib.contextmanager
def confined_pane(tether_home: Path, work: Path) -> Iterator[tuple[ConfinedShell, list[str]]]:
    shell_dir = tether_home / "shells" / "one"
    shell_dir.mkdir(parents=True)
    (shell_dir / "rc").write_text("PS1='confined$ '\n")
    confined = confine_interactive(
        SandboxSettings(),
        home=tether_home,
        cwd=str(work),
        command=["bash", "--rcfile", "/run/tether-shell/rc", "-i"],
        state_dir=tether_home / "sandbox" / "shells" / "one",
        extra_binds=[ExtraBind(source=str(shell_dir), dest="/run/tether-shell")],
    )
    tmux = ["tmux", "-S", str(tether_home / "tmux.sock"), "-f", "/dev/null"]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "confined", "-x", "200", "-y", "50",
                        confined.shell_command()], check=True)  # fmt: skip
        yield confined, tmux
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
        ConfinedShell.release(confined.state_dir, home=tether_home)


def _type(tmux: list[str], line: str) -> None:
    subprocess.run([*tmux, "send-keys", "-t", "confined", "-l", line], check=True)
    subprocess.run([*tmux, "send-keys", "-t", "confined", "Enter"], check=True)


@contextlib.contextmanager
def host_targets() -> Iterator[tuple[socket.socket, subprocess.Popen[bytes], Path]]:
    """A loopback listener, a process outside the sandbox, another tmux server's socket."""
    directory = Path(tempfile.mkdtemp(prefix="ti-", dir="/var/tmp"))
    other = ["tmux", "-S", str(directory / "s"), "-f", "/dev/null"]
    listener = socket.socket()
    victim = subprocess.Popen(["sleep", "600"])
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.setblocking(False)
        subprocess.run([*other, "new-session", "-d", "sleep 600"], check=True)
        yield listener, victim, directory / "s"
    finally:
        subprocess.run([*other, "kill-server"], capture_output=True, check=False)
        victim.kill()
        victim.wait()
        listener.close()
        (directory / "s").unlink(missing_ok=True)
        directory.rmdir()


def test_an_interactive_shell_in_a_pane_holds_the_escape_matrix(tether_home: Path, work: Path) -> None:
    sysctl = SYSCTL.read_text()
    token = secrets.token_hex(4)
    with (
        host_targets() as (listener, victim, other_socket),
        confined_pane(tether_home, work) as (confined, tmux),
    ):
        port = listener.getsockname()[1]
        attempts = [
            "touch /usr/tether-escape",
            "echo evil >> ~/.bashrc",
            f"echo x > {tether_home}/config.toml",
            f"ls -A {tether_home} | wc -l",
            f"tmux -S {tether_home}/tmux.sock ls",
            f"tmux -S {other_socket} ls",
            "touch /proc/1/root/etc/tether-escape",
            f"echo hi > /dev/tcp/127.0.0.1/{port}",
            "echo x > sub/.git/hooks/pre-commit",
            f"kill -9 {victim.pid}",
            f"echo {int(sysctl) + 1} > {SYSCTL}",
            "git init -q new && printf '#!/bin/sh\\nexit 0\\n' > new/.git/hooks/pre-commit",
            "set -o | grep -E '^monitor'",
            f"echo {token} > benign.txt",
        ]
        script = "; ".join(f'{a}; echo "rc=$? :: {a[:24]}"' for a in attempts)
        try:
            _type(tmux, f"{{ {script}; }} > out.txt 2>&1; echo done > done.fifo")
            assert _wait_for_line(work / "done.fifo") == "done\n"
        finally:
            if SYSCTL.read_text() != sysctl:
                SYSCTL.write_text(sysctl)
        repository_denials = confined.check_repositories()
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert victim.poll() is None
    out = (work / "out.txt").read_text()
    failed = [
        line.split(" :: ", 1)[1]
        for line in out.splitlines()
        if line.startswith("rc=") and not line.startswith("rc=0")
    ]
    assert failed == [a[:24] for a in attempts[:11] if not a.startswith("ls -A")], out
    assert "\n0\n" in out  # TETHER_HOME is shown empty
    assert "monitor        \ton" in out  # job control: the pane is the controlling terminal
    assert (work / "benign.txt").read_text() == f"{token}\n"
    assert SYSCTL.read_text() == sysctl and (work / ".bashrc").read_text() == "# mine\n"
    assert not Path("/usr/tether-escape").exists() and not (work / "sub/.git/hooks/pre-commit").exists()
    assert [(d.kind, d.target) for d in repository_denials] == [("git", f"{work}/new/.git/hooks/pre-commit")]
    assert (work / "new/.git/hooks/pre-commit.disabled-by-tether").exists()
    assert not (tether_home / "sandbox" / "shells" / "one").exists()  # released with the shell


def test_the_tracer_check_does_not_depend_on_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It ran in a scratch directory under TMPDIR; under a system directory (TMPDIR=/run/user/0),
    # now never a writable root, every confined shell's start would have been REFUSED.
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace")
    monkeypatch.setattr(tempfile, "tempdir", "/run")
    (tmp_path / "th").mkdir()
    settings = SandboxSettings()
    assert _tracer_check(settings, settings.bwrap_path(), strace, tmp_path / "th")
