"""A raw JSON-RPC driver for ``tether mcp`` over stdio: exact bytes in, parsed lines out.

The official client cannot send malformed input or act between the handshake and the SDK's
take-over; these tests need both. Reads wait on a queue with a deadline (no sleeps), and the
process is killed and reaped when the driver closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TETHER = str(Path(sys.executable).parent / "tether")
INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "raw-driver", "version": "1"},
}


class StdioDriver:
    """One ``tether mcp`` (or any command) process spoken to line by line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: Any, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        line = self._lines.get(timeout=timeout)
        assert line is not None, "tether mcp closed its stdout"
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    def recv_until(
        self, done: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Messages up to and including the first one ``done`` accepts."""
        seen = []
        while True:
            message = self.recv(timeout)
            seen.append(message)
            if done(message):
                return seen

    def response(self, rid: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The response to ``rid``; notifications and other responses before it are skipped."""
        return self.recv_until(lambda m: m.get("id") == rid and "method" not in m, timeout)[-1]

    def initialize(self) -> dict[str, Any]:
        self.request(1, "initialize", INIT_PARAMS)
        answer = self.response(1)
        self.notify("notifications/initialized")
        return answer

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.close_stdin()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)


def source_env() -> dict[str, str]:
    """``PATH``, and ``PYTHONPATH`` when set: a worktree's tests run its own source (PYTHONPATH
    first) in the server too, not the installed one's."""
    python_path = os.environ.get("PYTHONPATH")
    return {"PATH": os.environ["PATH"], **({"PYTHONPATH": python_path} if python_path else {})}


def tether_env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "TETHER_HOME": str(home),
        **source_env(),
        "HOME": os.environ.get("HOME", "/root"),
        **extra,
    }


@contextlib.contextmanager
def tether_mcp(home: Path, *args: str, **extra_env: str) -> Iterator[StdioDriver]:
    driver = StdioDriver([TETHER, "mcp", *args], tether_env(home, **extra_env))
    try:
        yield driver
    finally:
        driver.close()


class Gate:
    """A FIFO for ``TETHER_MCP_HANDOVER_GATE``: the SDK takes over once ``open()`` is called.

    Used as a context manager, the gate is opened on exit if the test did not, so a failing test
    never leaves ``tether mcp`` waiting on it.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / "handover.fifo"
        os.mkfifo(self.path)
        self.opened = False

    def open(self, timeout: float = 30.0) -> None:
        # Opening for writing waits until tether mcp opened it for reading (it has reached the
        # hand-over); closing at once gives it EOF and lets it go on.
        def release() -> None:
            with open(self.path, "wb"):
                pass

        thread = threading.Thread(target=release, daemon=True)
        thread.start()
        thread.join(timeout)
        assert not thread.is_alive(), "tether mcp never reached the hand-over gate"
        self.opened = True

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.opened:
            with contextlib.suppress(AssertionError):
                self.open(timeout=5.0)
