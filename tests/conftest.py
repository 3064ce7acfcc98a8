"""Shared fixtures: every test gets its own ``TETHER_HOME`` (and so its own tmux server); every test
process gets an empty ``HOME`` of its own (no shell a test starts runs the developer's ``~/.bashrc``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tether.cli.door import stop_door
from tether.config import load_config
from tether.process import bounds
from tether.shells import Shells


@pytest.fixture
def tether_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh state directory, exported as ``TETHER_HOME``; its tmux server and the command line's
    tools process are ended afterwards.

    tmux socket paths must stay short (sun_path is 108 bytes), so the home lives under a short
    temporary directory rather than pytest's deep per-test path.
    """
    home = tmp_path_factory.mktemp("th", numbered=True)
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_CONVERSATION", raising=False)
    yield home
    # Stopped, and waited for: one ending by itself (idle) no longer answers, but is still there.
    door = stop_door(home)
    _reap_ours(_doors_of(home) | ({door} if door else set()), deadline_s=30.0)
    socket = home / "tmux.sock"
    if socket.exists():
        doomed = _server_and_its_processes(socket)
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
        _reap_ours(doomed)
        # Confined shells ended with their tmux server, not through tether: their (now empty)
        # bounding groups go here, as the next tether process's first command would remove them.
        for base in bounds.support().dirs.values():
            bounds.sweep_stale(base)


def _server_and_its_processes(socket: Path) -> set[int]:
    """The tmux server, every process under it (shells, their commands, pipe-pane writers) and
    its clients (a killed ``tether mcp`` leaves its control client behind)."""
    tmux = ["tmux", "-S", str(socket)]
    out = subprocess.run(
        [*tmux, "display-message", "-p", "#{pid}", ";", "list-clients", "-F", "#{client_pid}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    pids = {int(p) for p in out if p.isdigit()}
    todo = list(pids)
    while todo:
        pid = todo.pop()
        for task in _listdir(f"/proc/{pid}/task"):
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in pids:
                    pids.add(child)
                    todo.append(child)
    return pids


def _doors_of(home: Path) -> set[int]:
    """The command line's tools processes of ``home`` (their argv names it)."""
    found = set()
    for entry in _listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if _DOOR in argv and str(home).encode() in argv:
                found.add(int(entry))
    return found


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _ppid(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def _running(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


def _reap_ours(pids: set[int], deadline_s: float = 3.0) -> None:
    """Once pytest is a subreaper (the process layer makes it one), the daemonized tmux server and,
    when it dies, every process it leaves behind are handed to us: collect them, or each test
    leaves zombies of pytest. Only these pids are waited for (never a child other code awaits),
    and never past the deadline. A pid adopted by another subreaper (a ``tether mcp`` child still
    running) is its business to collect, but it is waited for until it has ended: a server that
    is not our child (pytest is no subreaper yet) still runs its exit when ``kill-server`` returns."""
    me = os.getpid()
    deadline = time.monotonic() + deadline_s
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            parent = _ppid(pid)
            if parent is None or (parent != me and parent not in waiting and not _running(pid)):
                waiting.discard(pid)  # gone, or ended and someone else's to collect
            elif parent == me:
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(pid, os.WNOHANG)[0] != pid:
                        continue
                waiting.discard(pid)
        if waiting:
            time.sleep(0.005)  # polling kernel state with a deadline: waitpid has no timeout


def pytest_configure(config: pytest.Config) -> None:
    # Every shell a test starts sources ~/.bashrc, so a test process never uses the developer's
    # HOME: the machine's ~/.bashrc runs `pyenv rehash`, which waits 60 s on a lock that a shell
    # killed mid-start-up leaves behind; with it, every shell missed its prompt and a whole CI run
    # failed. Each process (each pytest-xdist worker) gets one empty HOME for its whole run, as a
    # server has one HOME for its life; it has what a developer's always has: an identity for git.
    # A test that wants a ~/.bashrc of its own sets HOME itself.
    home = Path(tempfile.mkdtemp(prefix="tether-tests-home-"))
    (home / ".gitconfig").write_text("[user]\n\tname = tether tests\n\temail = tests@tether.invalid\n")
    os.environ["HOME"] = str(home)
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    _real_python3_first(home / "bin")


def _real_python3_first(bin_dir: Path) -> None:
    """Put the interpreter ``python3`` names first on PATH, as ``python3`` itself.

    On a machine with pyenv, ``python3`` is a shim: a script that ``env`` hands to bash, which
    ``exec``s ``pyenv``, which ``exec``s the interpreter. The process the shell started is named
    ``python3``, then ``bash`` and ``pyenv``, then ``python3`` again; a test that waits for, or
    looks at, a process named ``python3`` (``noproc``, ``foreground``, what the guard sees in
    front) saw the first and then none, while the interpreter had not started yet."""
    found = shutil.which("python3")
    if found is None:
        return
    real = subprocess.run(
        [found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not real or Path(real).resolve() == Path(found).resolve():
        return  # already the interpreter itself
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(real)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(autouse=True)
def _no_inherited_tether_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's own TETHER_HOME must never be touched by a test.
    if "TETHER_HOME" in os.environ:
        monkeypatch.delenv("TETHER_HOME")


@pytest.fixture
async def home_shells(tether_home: Path) -> AsyncIterator[Shells]:
    """The shells face of ``tether_home`` on the test's loop (for a person's terminal plumbing)."""
    shells = Shells.get(load_config(tether_home))
    try:
        yield shells
    finally:
        await shells.close()


def _zombie(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True  # gone
    return raw[raw.rfind(b")") + 2 :].split()[0] == b"Z"


_WATCHED = frozenset({b"tmux", b"sshd", b"ssh"})
_DOOR = b"tether.cli.door.server"  # the command line's tools process (``python -m`` it)


def _stale_tmux(base: Path) -> list[tuple[int, str]]:
    """tmux processes (servers and clients) on a socket under this run's temporary directory, the
    command line's tools processes of homes there, and
    the remote-host tests' loopback sshd listeners and ssh masters (``sshd: … -f BASE/…``,
    ``ssh: BASE/…/ssh/NAME [mux]``: both retitle themselves, so the program is argv[0]'s first word)."""
    found = []
    for entry in _listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if _zombie(int(entry)):
            continue  # dead already: its parent (init, for a daemon orphaned by its tether) reaps it
        program = os.path.basename(argv[0].split(b" ")[0].rstrip(b":")) if argv else b""
        watched = program in _WATCHED or _DOOR in argv
        if watched and any(str(base).encode() in a for a in argv):
            found.append((int(entry), b" ".join(argv).decode("utf-8", "replace")[:120]))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing outlives the tests: a tmux server or client left on a test's socket, a test's sshd
    or ssh master, or a test home's command-line tools process, fails the run (and is ended, so
    it does not outlive the run either)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    base = factory.getbasetemp()
    stale = _stale_tmux(base)
    for pid, _ in stale:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    if stale:
        lines = "\n".join(f"  {pid}: {cmd}" for pid, cmd in stale)
        print(f"\nstale tmux/ssh/door processes after the tests (ended now):\n{lines}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
