"""The command line's side of its tools process: find it, start it when none answers, call tools.

Invariant: a command that acts through the tools gets its answer from a server of exactly its own
build and configuration (``tether.stamp``'s key, checked on every connection), started at most once
at a time per ``TETHER_HOME`` (the starter holds ``door.lock`` until the new server answers), and
never as this process's child (the server's launcher forks it away and exits), so nothing is left
for a command to reap or wait for. The standard library and tether's light modules only (errors,
home, stamp), and nothing imported that the call does not use: this is all a warm command loads
beyond its parser.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from tether.cli.door.wire import DOOR_FORMAT, SERVER_MODULE, DoorPaths, decode, encode, locked
from tether.errors import TetherError
from tether.home import ensure_home, open_log, resolve_home
from tether.stamp import build_key

# How long a new server may take to load the tools and answer (a cold start takes ~1 s; a busy
# machine many times that).
START_TIMEOUT_S: Final = 120.0
# Servers of another build may retire in the way (two installs sharing a home): try this often.
_ATTEMPTS: Final = 3


class Answer(NamedTuple):
    """A tool's result as the command line sees it."""

    text: str
    structured: dict[str, Any]
    is_error: bool


class DoorTools:
    """One connection to this home's tools process; calls are answered in order."""

    def __init__(self, home: Path, sock: socket.socket, pid: int) -> None:
        self.home = home
        self.pid = pid  # the server's
        self._sock = sock
        self._reader = sock.makefile("rb")

    def call(self, name: str, arguments: Mapping[str, Any], *, audited: bool = True) -> Answer:
        """One tool call as actor and source ``cli``; a refused or failed call raises its
        ``TetherError`` (same code and message as the tool gave)."""
        reply = self._ask({"call": name, "arguments": dict(arguments), "audited": audited})
        if "error" in reply:
            error = reply["error"]
            raise TetherError(str(error["message"]), code=str(error["code"]))
        result = reply["result"]
        return Answer(str(result["text"]), dict(result["structured"]), bool(result["isError"]))

    def close(self) -> None:
        self._reader.close()
        self._sock.close()

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            self._sock.sendall(encode(message))
            line = self._reader.readline()
        except OSError as exc:
            raise _lost(self.home, exc) from exc
        if not line:
            raise _lost(self.home, None)
        return decode(line)


@contextlib.contextmanager
def tools_session(home: Path | None = None) -> Iterator[DoorTools]:
    """A connection to the tools process of ``home`` (default: this ``TETHER_HOME``), started if
    none answers; closed on exit."""
    tools = connect(ensure_home(resolve_home() if home is None else home))
    try:
        yield tools
    finally:
        tools.close()


def call_tool(name: str, arguments: Mapping[str, Any]) -> Answer:
    """One audited tool call as ``cli``."""
    with tools_session() as tools:
        return tools.call(name, arguments)


def connect(home: Path) -> DoorTools:
    paths = DoorPaths.of(home)
    key = build_key(home, (DOOR_FORMAT,))
    for _ in range(_ATTEMPTS):
        sock = _connect(paths.socket)
        if sock is None:
            paths.dir.mkdir(mode=0o700, exist_ok=True)
            with locked(paths.lock):
                sock = _connect(paths.socket)  # another command may have started one meanwhile
                if sock is None:
                    _start(home)
                    sock = _connect(paths.socket)
            if sock is None:
                raise TetherError(
                    f"the tools process of {home} started but does not answer at {paths.socket}; "
                    f"see {home / 'logs' / 'door.log'}",
                    code="UNAVAILABLE",
                )
        tools = DoorTools(home, sock, 0)
        try:
            hello = tools._ask({"hello": key})
        except TetherError:
            hello = {}  # it was ending (idle) as we connected: start one
        if hello.get("ok"):
            tools.pid = int(hello["pid"])
            return tools
        tools.close()  # a server of another build has retired, or one ended: start ours
    raise TetherError(
        f"the tools process of {home} went away before it answered, {_ATTEMPTS} times: another "
        f"tether build sharing this TETHER_HOME replaces it each time, or it ends at once (see "
        f"{home / 'logs' / 'door.log'}); run one version of tether per TETHER_HOME at a time",
        code="UNAVAILABLE",
    )


def stop_door(home: Path) -> int | None:
    """End the tools process of ``home``, whatever its build, and return its pid once it has
    ended (it finishes the calls it is running first); None when none answers."""
    sock = _connect(DoorPaths.of(home).socket)
    if sock is None:
        return None
    tools = DoorTools(home, sock, 0)
    try:
        pid = int(tools._ask({"stop": True})["pid"])
        sock.settimeout(START_TIMEOUT_S)
        while tools._reader.read(4096):  # the server keeps this connection until it exits
            pass
    except (TetherError, OSError):
        return None  # it ended meanwhile
    finally:
        tools.close()
    _wait_gone(pid, START_TIMEOUT_S)  # its connection closes a moment before the process is gone
    return pid


def _wait_gone(pid: int, timeout_s: float) -> None:
    """Until process ``pid`` (not this process's child) has exited, or ``timeout_s`` passed."""
    import select  # only here: no command that calls a tool needs it

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # readable once the process has exited
        poller.poll(timeout_s * 1000)
    finally:
        os.close(fd)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()  # none listens: none ever did, or it ended (a left socket file answers nothing)
        return None
    except OSError as exc:  # not ours to reach, or a path longer than a socket's 107 bytes
        sock.close()
        raise TetherError(
            f"cannot reach the command line's tools process at {path}: {exc.strerror or exc}; "
            "TETHER_HOME must be a short path that only you can write to",
            code="UNAVAILABLE",
        ) from exc
    return sock


def _start(home: Path) -> None:
    """Start a server for ``home`` and wait until it listens (or says why it cannot)."""
    import select
    import subprocess
    import time

    from tether.process.adopt import OWN_PROCESS

    log = home / "logs" / "door.log"
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        with open(open_log(log), "ab") as out:
            launcher = _popen(
                [sys.executable, "-m", SERVER_MODULE, "--ready-fd", str(write_end), str(home)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                pass_fds=(write_end,),
                start_new_session=True,  # no terminal's signals (Ctrl-C on this command) reach it
                cwd="/",
                # The home's own process, wherever it was first asked for: not a shell's (a
                # shell's processes end with it, found by this marker and by descent; tether's
                # own are spared, ``OWN_PROCESS``).
                env={
                    **{k: v for k, v in os.environ.items() if k != "TETHER_SHELL"},
                    "TETHER_HOME": str(home),
                    OWN_PROCESS: "door",
                },
            )
        os.close(write_end)
        write_end = -1
        launcher.wait()  # it forks the server away and exits at once
        deadline = time.monotonic() + START_TIMEOUT_S
        data = b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                raise TetherError(
                    f"the tools process of {home} did not start within {START_TIMEOUT_S:.0f} s; see {log}",
                    code="UNAVAILABLE",
                )
            chunk = os.read(read_end, 4096)
            if not chunk:
                raise TetherError(
                    f"the tools process of {home} ended before it was ready; see {log}",
                    code="UNAVAILABLE",
                )
            data += chunk
        ready = decode(data)
        if "error" in ready:
            # It ends right after saying why, and its end closes the pipe: wait for that, so that no
            # tools process is left of a command that failed (a caller may remove the home next).
            while select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))[0]:
                if not os.read(read_end, 4096):
                    break
            raise TetherError(str(ready["error"]["message"]), code=str(ready["error"]["code"]))
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def _popen(argv: list[str], **options: Any) -> Any:
    import subprocess

    try:
        return subprocess.Popen(argv, **options)
    except OSError as exc:
        raise TetherError(
            f"cannot start the command line's tools process ({argv[0]}): {exc.strerror or exc}",
            code="UNAVAILABLE",
        ) from exc


def _lost(home: Path, exc: OSError | None) -> TetherError:
    why = f" ({exc})" if exc is not None else ""
    return TetherError(
        f"the tools process of {home} closed the connection{why}; see {home / 'logs' / 'door.log'} "
        "and run the command again",
        code="UNAVAILABLE",
    )
