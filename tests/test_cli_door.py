"""The command line's tools process (``tether.cli.door``): one per home, shared, of the command's
own build and configuration, nobody's child, and gone when it should be.

Real ``tether`` commands in subprocesses where a command's own process matters (who starts the
server, how many start at once); ``tools_session`` in the test where only the server does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hang import HANG_S
from proc_probe import alive_with, wait_until
from tether.audit import query
from tether.cli.door import stop_door, tools_session
from tether.errors import TetherError

TETHER = str(Path(sys.executable).parent / "tether")
DOOR = "tether.cli.door.server"
_QUIET: dict[str, int] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}


def _doors(home: Path) -> set[int]:
    """The live tools processes serving ``home`` (their argv names the module and the home)."""
    return set(alive_with(DOOR)) & set(alive_with(str(home)))


def _until(done: Callable[[], bool]) -> None:
    assert wait_until(done), "waited HANG_S for a tools process to end"


def _gone(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # adopted by pytest (a subreaper): collect it
            return True
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return True
    return state == b"Z"  # ended, and someone else's to collect


def _tether(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TETHER, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TETHER_HOME": str(home)},
        timeout=HANG_S,
    )


def test_commands_share_one_tools_process_that_is_nobodys_child(tether_home: Path) -> None:
    first = subprocess.Popen(
        [TETHER, "shell", "list", "--json"],
        stdout=subprocess.PIPE,
        env={**os.environ, "TETHER_HOME": str(tether_home)},
    )
    out, _ = first.communicate(timeout=HANG_S)
    assert first.returncode == 0 and json.loads(out) == {"shells": []}
    (door,) = _doors(tether_home)
    # Not the command's child: the command ended without waiting for it, and it runs on.
    parent = int(Path(f"/proc/{door}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    assert parent != first.pid
    assert os.getsid(door) != os.getsid(0)  # no terminal's Ctrl-C reaches it

    assert _tether(tether_home, "shell", "list").returncode == 0
    assert _tether(tether_home, "audit", "verify").returncode == 0
    assert _doors(tether_home) == {door}
    with tools_session(tether_home) as tools:
        assert tools.pid == door
    # Each command acted once, as cli, through the tools (audited by the registry's middleware).
    listed = [r for r in query(tether_home, source="cli", limit=50) if r.tool == "shell_records"]
    assert [(r.actor, r.outcome) for r in listed] == [("cli", "ok"), ("cli", "ok")]

    mode = os.stat(tether_home / "door").st_mode & 0o777
    assert mode == 0o700 and os.stat(tether_home / "door" / "door.sock").st_mode & 0o077 == 0


def test_first_commands_at_once_start_one_tools_process(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    commands = [
        subprocess.Popen(
            [TETHER, "shell", "list"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        for _ in range(4)
    ]
    for command in commands:
        _, err = command.communicate(timeout=HANG_S)
        assert command.returncode == 0, err
    assert len(_doors(tether_home)) == 1


def test_a_changed_configuration_retires_the_old_process(tether_home: Path) -> None:
    with tools_session(tether_home) as tools:
        old = tools.pid
    (tether_home / "config.toml").write_text("[cli]\ndoor_idle_seconds = 200\n")
    with tools_session(tether_home) as tools:
        new = tools.pid
        assert tools.call("shell_records", {}).structured == {"shells": []}
    assert new != old
    _until(lambda: _gone(old))
    assert _doors(tether_home) == {new}


def test_a_client_of_another_build_makes_it_retire_at_once(tether_home: Path) -> None:
    with tools_session(tether_home) as tools:
        door = tools.pid
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(tether_home / "door" / "door.sock"))
    sock.sendall(b'{"hello": "another build"}\n')
    assert json.loads(sock.makefile("rb").readline()) == {"stale": True}
    # Its socket was gone before the answer: the other build's command starts its own server.
    assert not (tether_home / "door" / "door.sock").exists()
    sock.close()
    _until(lambda: _gone(door))


def test_a_killed_tools_process_is_replaced_by_the_next_command(tether_home: Path) -> None:
    with tools_session(tether_home) as tools:
        door = tools.pid
    os.kill(door, signal.SIGKILL)
    _until(lambda: _gone(door))
    assert (tether_home / "door" / "door.sock").exists()  # left behind, answering nobody
    done = _tether(tether_home, "shell", "list")
    assert done.returncode == 0, done.stderr
    assert len(_doors(tether_home) - {door}) == 1


def test_it_ends_when_idle_and_takes_its_socket_along(tether_home: Path) -> None:
    # 0: it ends as soon as its last command leaves, but waits for the one that started it.
    (tether_home / "config.toml").write_text("[cli]\ndoor_idle_seconds = 0\n")
    with tools_session(tether_home) as tools:
        door = tools.pid
        tools.call("shell_records", {})
    _until(lambda: _gone(door))
    assert not (tether_home / "door" / "door.sock").exists()
    assert "no command for" in (tether_home / "logs" / "door.log").read_text()
    assert _tether(tether_home, "shell", "list").returncode == 0  # and the next command starts one


def test_a_bad_configuration_is_one_clear_error_and_leaves_nothing_running(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text("[nope]\n")
    done = _tether(tether_home, "shell", "list")
    assert done.returncode == 2
    assert done.stderr.startswith("tether: INVALID_ARGUMENT: config.toml: unknown section [nope]; allowed:")
    assert "Traceback" not in done.stderr
    assert not _doors(tether_home)  # it said why and ended before the command did


def test_tool_errors_keep_their_code_and_bad_requests_are_answered(tether_home: Path) -> None:
    with tools_session(tether_home) as tools:
        with pytest.raises(TetherError) as unknown:
            tools.call("no_such_tool", {})
        assert unknown.value.code == "NOT_FOUND"
        with pytest.raises(TetherError) as bad:
            tools.call("shell_timeline", {"shell": "dsh-abc123", "limit": 0})
        assert bad.value.code == "INVALID_ARGUMENT"
        door = tools.pid
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(tether_home / "door" / "door.sock"))
    sock.sendall(b"not json\n")
    answer = json.loads(sock.makefile("rb").readline())
    assert answer["error"]["code"] == "INVALID_ARGUMENT"
    sock.close()
    with tools_session(tether_home) as tools:  # and it keeps serving
        assert tools.pid == door
        assert tools.call("shell_records", {}).structured == {"shells": []}


def test_bytes_that_are_not_utf8_are_one_clear_error_that_never_shows_them(tether_home: Path) -> None:
    """A command line's or stdin's bytes that are not UTF-8 (a Latin-1 terminal, say) reach Python
    as lone surrogates: they travel to the tools escaped, and are refused there by field (the
    registry's check), never echoed."""
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    secret = b"s3cr\xe9t-value"  # Latin-1, as such a terminal would send it
    runs = [
        ([b"shell", b"lock", b"dsh-abc123", b"--reason", b"caf\xe9"], b"", "shell_lock: field 'reason'"),
        ([b"audit", b"show", b"--shell", b"\xff"], b"", "audit_show: field 'shell'"),
        ([b"vault", b"set", b"TOKEN"], secret, "vault: field 'value'"),
    ]
    for args, stdin, field in runs:
        argv = [TETHER.encode(), *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=HANG_S)
        err = done.stderr.decode("utf-8", "backslashreplace")
        assert done.returncode == 2, err
        assert err.startswith(f"tether: INVALID_ARGUMENT: {field} is not Unicode text"), err
        assert "Traceback" not in err and b"s3cr" not in done.stderr + done.stdout
    with tools_session(tether_home) as tools:  # nothing was stored, and it keeps serving
        assert tools.call("vault", {"action": "list"}).structured["items"] == []


@pytest.fixture
def home_in_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home right under ``/tmp``, for a test that lets another user through its parents: those
    of ``tether_home`` are pytest's, shared with every pytest session of this user, and a session
    starting meanwhile (another run beside this one) takes that access away again (pytest keeps
    its root directory 0700)."""
    home = Path(tempfile.mkdtemp(prefix="th-door-", dir="/tmp"))
    monkeypatch.setenv("TETHER_HOME", str(home))
    try:
        yield home
    finally:
        stop_door(home)  # returns once it has ended
        shutil.rmtree(home, ignore_errors=True)


def test_another_user_cannot_reach_it(home_in_tmp: Path) -> None:
    """Layer by layer, as another user would try: the door's directory, its socket's mode, and
    the server's own peer check (each opened in turn so the next one is what refuses)."""
    tether_home = home_in_tmp
    with tools_session(tether_home) as tools:
        door = tools.pid
    sock_path = tether_home / "door" / "door.sock"
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(sock_path)!r})\n"
        "except PermissionError:\n"
        "    sys.exit(3)\n"
        "try:\n"
        '    s.sendall(b\'{"hello": "x"}\\n\')\n'
        "    answer = s.recv(100)\n"
        "except (ConnectionResetError, BrokenPipeError):\n"
        "    answer = b''\n"
        "sys.exit(4 if answer == b'' else 5)\n"
    )

    def attempt() -> int:
        # The system's interpreter: the test's own lives under /root, which that user cannot reach.
        return subprocess.run(
            ["/usr/bin/python3", "-c", probe], user=65534, group=65534, timeout=HANG_S, check=False
        ).returncode

    opened = [*reversed(tether_home.parents[:-2]), tether_home, tether_home / "door"]
    modes = {path: os.stat(path).st_mode & 0o7777 for path in [*opened, sock_path]}
    try:
        for path in opened[:-1]:
            os.chmod(path, modes[path] | 0o011)  # others may pass through, not list or write
        assert attempt() == 3  # door/ is 0700
        os.chmod(opened[-1], 0o711)
        assert attempt() == 3  # the socket is 0600
        os.chmod(sock_path, 0o666)
        assert attempt() == 4  # the server hangs up on another uid without a word
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)
    with tools_session(tether_home) as tools:  # and it still serves its user, without retiring
        assert tools.pid == door
    assert stop_door(tether_home) == door
    _until(lambda: _gone(door))


def test_a_home_too_long_for_a_socket_is_one_clear_error(tether_home: Path) -> None:
    home = tether_home / ("h" * 100)  # a Unix socket's path holds 107 bytes
    done = _tether(home, "shell", "list")
    assert done.returncode == 2
    assert done.stderr.startswith("tether: UNAVAILABLE: cannot reach the command line's tools process at ")
    assert "path too long" in done.stderr and "Traceback" not in done.stderr
    assert _doors(home) == set()


def test_a_relative_home_is_the_same_directory_for_the_command_and_its_tools_process(
    tether_home: Path,
) -> None:
    # The tools process starts in "/": handed the relative name, it bound no socket and died.
    done = subprocess.run(
        [TETHER, "shell", "list", "--json"],
        capture_output=True,
        text=True,
        cwd=tether_home.parent,
        env={**os.environ, "TETHER_HOME": tether_home.name},
        timeout=HANG_S,
    )
    assert done.returncode == 0 and json.loads(done.stdout) == {"shells": []}, done.stderr
    assert (tether_home / "door" / "door.sock").exists()
    assert len(_doors(tether_home)) == 1
