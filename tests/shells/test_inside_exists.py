"""``hosts.inside.exists_inside``: a path as a process sees it from its own root, symlinks followed
by hand (an absolute target from that root, never the host's), ``..`` stopping at the root.

A real sandbox: bubblewrap with a private /tmp and a masked directory, looked at from the host."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hang import HANG_S
from tether.shells.hosts.inside import exists_inside

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
PRIVATE = f"/tmp/tether-private-{secrets.token_hex(8)}"


@pytest.fixture
def sandboxed(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    """(pid of a process in a sandbox, its writable directory, a host directory masked in it); in
    its private ``/tmp`` it made ``PRIVATE``, a name nothing on the host holds."""
    work, secret = tmp_path / "work", tmp_path / "secret"
    work.mkdir()
    secret.mkdir()
    (secret / "key").write_text("host only\n")
    script = (
        f"cd {work} && touch {PRIVATE} && ln -s {secret}/key abs-link && ln -s ../../.. up && "
        "ln -s loop loop && mkdir -p sub && cd sub && touch here && touch ready && exec sleep 60"
    )
    proc = subprocess.Popen(
        ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
         "--bind", str(work), str(work), "--tmpfs", str(secret), "--remount-ro", str(secret),
         "--unshare-pid", "--die-with-parent", "--", "bash", "-c", script]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + HANG_S
        while not (work / "sub" / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = _sleeper(proc.pid)
        yield pid, work, secret
    finally:
        proc.kill()
        proc.wait()


def _sleeper(bwrap_pid: int) -> int:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(bwrap_pid).children(recursive=True):
                if child.name() == "sleep":
                    return int(child.pid)
        time.sleep(0.01)
    raise AssertionError("the sandboxed process did not start")


def test_paths_are_looked_at_from_the_process_root(sandboxed: tuple[int, Path, Path]) -> None:
    pid, work, secret = sandboxed
    assert (secret / "key").exists() and not Path(PRIVATE).exists()  # the host's view
    assert exists_inside(pid, PRIVATE)  # the private /tmp
    assert exists_inside(pid, "here") and exists_inside(pid, "../sub/here")  # from its cwd
    assert not exists_inside(pid, str(secret / "key"))  # masked inside
    # An absolute link resolves from the sandbox's root, not the host's.
    assert not exists_inside(pid, str(work / "abs-link"))
    assert not exists_inside(pid, "../abs-link")
    assert exists_inside(pid, str(work / "up"))  # .. stops at the root
    assert exists_inside(pid, f"../up/../../../..{PRIVATE}")
    assert not exists_inside(pid, str(work / "loop"))  # ELOOP: not there
    assert not exists_inside(pid, "here/below")  # not a directory
    assert not exists_inside(2**22 + 7, "/")  # no such process
