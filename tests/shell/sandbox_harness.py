"""Shared set-up for the sandbox tests: a workspace, a user home, a loopback listener, a runner."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from hang import HANG_S
from tether.audit.log import AuditLog
from tether.shell import ShellEnvRegistry, ShellExecRequest, ShellRunResult
from tether.shell.options import LocalShellOptions
from tether.shell.sandbox import SandboxBashExecutor, SandboxSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class Box:
    """A workspace (``work``, a git repository), a user home (``user``, itself a writable root, so
    only the protection rules keep its start-up files safe) and a ``TETHER_HOME`` inside it."""

    base: Path
    work: Path
    user: Path
    home: Path

    def executor(self, **settings: object) -> SandboxBashExecutor:
        values: dict[str, object] = {"writable_roots": (str(self.user),)}
        values.update(settings)
        return SandboxBashExecutor(
            LocalShellOptions(cwd=str(self.work), spill_dir=self.home / "spill"),
            settings=SandboxSettings(**values),  # type: ignore[arg-type]
            home=self.home,
            audit=AuditLog(self.home),
            env_registry=ShellEnvRegistry(home=self.home),
        )


def make_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    user = tmp_path / "user"
    user.mkdir()
    (user / ".bashrc").write_text("original\n")
    home = user / ".tether"
    (home / "audit").mkdir(parents=True)
    (home / "config.toml").write_text("")
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv("TETHER_HOME", str(home))
    return Box(base=tmp_path, work=work, user=user, home=home)


async def run(executor: SandboxBashExecutor, command: str, **request: str) -> ShellRunResult:
    spec = executor.resolve(ShellExecRequest(command, timeout_ms=30_000, **request))  # type: ignore[arg-type]
    execution = await executor.execute(spec)
    return await asyncio.wait_for(execution.result(), HANG_S)


@contextmanager
def loopback_listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 (the host's loopback, not the sandbox's)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock
    finally:
        sock.close()


def pending_connection(sock: socket.socket) -> bool:
    """Whether anyone connected to ``sock`` (checked without waiting)."""
    sock.setblocking(False)
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True
