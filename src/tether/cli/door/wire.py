"""What the command line and its tools process say to each other, and where they meet.

Invariant: one JSON object per line in each direction, over a Unix socket that only this user can
reach (``$TETHER_HOME/door/``, 0700; the socket 0600; the server also checks its peer's uid). A
connection opens with ``hello`` carrying the client's build key (``tether.stamp``); the server
answers ``ok`` only when its own key is the same, else ``stale`` (and retires). Then any number of
calls, each answered once, in order:

    {"hello": KEY}                                  → {"ok": true, "pid": PID} | {"stale": true}
    {"call": NAME, "arguments": {...}, "audited": B} → {"result": {"text", "structured", "isError"}}
                                                      | {"error": {"code", "message"}}
    {"stop": true}                                  → {"ok": true}   (then it ends)

Starting, the server writes one line to the pipe its starter gave it: ``{"ready": PID}`` or
``{"error": {...}}`` (a bad ``config.toml``, say), and closes it. Standard library only: the
client side of this runs before every command that acts through the tools.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, NamedTuple

# Part of the build key: a change of this wire gives every old server the slip.
DOOR_FORMAT: Final = "door-1"
# The server's own module, run as ``python -m`` (argv: --ready-fd N HOME).
SERVER_MODULE: Final = "tether.cli.door.server"
# A request line a server reads at most (a vault value, say): the rest of the line is refused.
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024


class DoorPaths(NamedTuple):
    """The tools process's files under one ``TETHER_HOME``."""

    dir: Path
    socket: Path
    lock: Path  # held by whoever starts or retires a server, so only one listens at a time

    @classmethod
    def of(cls, home: Path) -> DoorPaths:
        base = home / "door"
        return cls(dir=base, socket=base / "door.sock", lock=base / "door.lock")


def encode(message: dict[str, Any]) -> bytes:
    """ASCII JSON: a lone surrogate (a command line's byte that is not UTF-8) travels as its escape,
    for the tools to refuse by name (``ToolRegistry.call``) rather than this process to crash."""
    return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One line as a JSON object; ``ValueError`` for anything else."""
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold ``door.lock`` (blocking): starting a server, or removing an ending one's socket."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
