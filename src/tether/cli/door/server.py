"""The command line's tools process: one per ``TETHER_HOME``, with the tools loaded and warm.

Loading the tools (the SDK-free catalog: pydantic, the shells layer, the audit log) takes about
half a second, ten times what a command may take. So the first command that needs them starts this
process, and every command after it asks it over ``door/door.sock`` — like tmux's own server, it
is started on first use, shared, and ends by itself ``[cli] door_idle_seconds`` after the last
command left. Shells never live here (tmux keeps them), so ending it loses nothing.

Invariants:

- Every call is one ``ToolRegistry.call`` as actor and source ``cli`` on the tools
  ``build_catalog`` assembles: checked, masked and audited exactly as an agent's or the panel's.
- It answers only its own build and configuration: a client with another key is answered
  ``stale``, and this server retires at once (its socket is gone before the answer is sent, so
  the client starts a server of its own build) and ends when its running calls are done.
- Only the user who owns the home is served (the directory is 0700, the socket 0600, and each
  peer's uid is checked with ``SO_PEERCRED``).
- Its socket path is removed only while it is still this server's own, under ``door.lock``, which
  a starter holds until its new server listens: one server listens per home, and an ending server
  never removes its successor's socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any, Final

from tether.cli.door.wire import DOOR_FORMAT, MAX_REQUEST_BYTES, DoorPaths, decode, encode, locked
from tether.config import load_config
from tether.errors import TetherError
from tether.mcp.logs import configure_logging
from tether.process.adopt import OWN_PROCESS
from tether.process.seal import seal_environment
from tether.stamp import build_key
from tether.tools.catalog import ToolCatalog, build_catalog
from tether.tools.registry import CallContext

logger = logging.getLogger(__name__)

CLI_CONTEXT: Final = CallContext(actor="cli", source="cli")
# How long a new server waits for its first command, whatever ``door_idle_seconds`` says.
FIRST_COMMAND_GRACE_S: Final = 60.0


class DoorServer:
    """Serves tool calls to this user's commands until idle, stopped, stale or signalled."""

    def __init__(self, catalog: ToolCatalog, paths: DoorPaths, key: str, idle_s: float) -> None:
        self._catalog = catalog
        self._paths = paths
        self._key = key
        self._idle_s = idle_s
        self._clients = 0
        self._served = False
        self._wake = asyncio.Event()
        self._ending = False
        self._listener: socket.socket | None = None
        self._socket_inode = 0
        self._stoppers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def run(self, listener: socket.socket, ready_fd: int) -> None:
        self._listener = listener
        # The path's own inode (a socket's fstat names the socket, not the file that reaches it).
        self._socket_inode = os.stat(self._paths.socket).st_ino
        self._server = await asyncio.start_unix_server(self._handle, sock=listener, limit=MAX_REQUEST_BYTES)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, self._retire)
        _say_ready(ready_fd, {"ready": os.getpid()})
        self._catalog.start()
        try:
            while not self._ending:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self._idle_timeout())
                except TimeoutError:
                    logger.info("no command for %.0f s: ending", self._idle_s)
                    self._retire()
            while self._clients:  # the calls already running finish and are answered
                self._wake.clear()
                await self._wake.wait()
        finally:
            self._retire()
            await self._catalog.aclose()

    def _idle_timeout(self) -> float | None:
        if self._clients:
            return None
        # The command that started this process connects only after it said it was ready.
        return self._idle_s if self._served else max(self._idle_s, FIRST_COMMAND_GRACE_S)

    def _retire(self) -> None:
        """Stop listening now; the path goes with it if it is still ours (see the module docstring)."""
        if self._ending:
            return
        self._ending = True
        self._wake.set()
        if self._listener is not None:
            with locked(self._paths.lock), contextlib.suppress(FileNotFoundError):
                if os.stat(self._paths.socket).st_ino == self._socket_inode:
                    os.unlink(self._paths.socket)
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._served = True
        self._clients += 1
        self._wake.set()
        try:
            if _peer_uid(writer) != os.getuid():
                return
            first = await _read(reader, writer)
            if first is None:
                return
            if first.get("stop"):
                logger.info("asked to stop")
                self._retire()
                await _reply(writer, {"ok": True, "pid": os.getpid()})
                # Left open: the kernel closes it as this process ends, which is the asker's sign.
                self._stoppers.append(writer)
                return
            if first.get("hello") != self._key:
                logger.info("a command of another build or configuration came: retiring")
                self._retire()
                await _reply(writer, {"stale": True})
                return
            await _reply(writer, {"ok": True, "pid": os.getpid()})
            while (request := await _read(reader, writer)) is not None:
                await _reply(writer, await self._answer(request))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the command went away (Ctrl-C): a call it started has finished and is audited
        finally:
            self._clients -= 1
            self._wake.set()
            if writer not in self._stoppers:
                writer.close()

    async def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        name, arguments, audited = (
            request.get("call"),
            request.get("arguments", {}),
            request.get("audited", True),
        )
        if not isinstance(name, str) or not isinstance(arguments, dict) or not isinstance(audited, bool):
            return _error("INVALID_ARGUMENT", 'a call is {"call": NAME, "arguments": {...}, "audited": BOOL}')
        try:
            result = await self._catalog.registry.call(name, arguments, CLI_CONTEXT, audited=audited)
        except TetherError as exc:
            return _error(exc.code, exc.message)
        except Exception:
            logger.exception("tool %s failed unexpectedly for the command line", name)
            return _error("INTERNAL", f"tool {name} failed unexpectedly; {_log(self._paths)} has the details")
        return {"result": {"text": result.text, "structured": result.structured, "isError": result.is_error}}


async def _read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict[str, Any] | None:
    """The next request, or None at the end of the connection (or of a malformed one, answered)."""
    try:
        line = await reader.readline()
    except ValueError:  # asyncio's LimitOverrunError: a line longer than the limit
        await _reply(writer, _error("INVALID_ARGUMENT", f"a request is at most {MAX_REQUEST_BYTES} bytes"))
        return None
    if not line:
        return None
    try:
        return decode(line)
    except ValueError:
        await _reply(writer, _error("INVALID_ARGUMENT", "a request is one JSON object on one line"))
        return None


async def _reply(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(encode(message))
    await writer.drain()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _peer_uid(writer: asyncio.StreamWriter) -> int:
    raw = writer.get_extra_info("socket").getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
    )
    return int(struct.unpack("3i", raw)[1])


def _log(paths: DoorPaths) -> Path:
    return paths.dir.parent / "logs" / "door.log"


def _say_ready(fd: int, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the starter gave up waiting
        os.write(fd, encode(message))
    os.close(fd)


def _listen(paths: DoorPaths) -> socket.socket:
    """Bind the socket (its starter holds ``door.lock``: a file left there answers nobody)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(paths.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old = os.umask(0o177)
    try:
        listener.bind(str(paths.socket))
    finally:
        os.umask(old)
    listener.listen(64)
    return listener


def serve(home: Path, ready_fd: int) -> int:
    """Load the tools, listen, say so on ``ready_fd``, serve until done."""
    paths = DoorPaths.of(home)
    try:
        config = load_config(home)
        seal_environment(config.env)  # before any thread, child or tmux server exists
        # Its mark stays where ``/proc`` shows it; what it starts is not tether's own for that.
        os.environ.pop(OWN_PROCESS, None)
        configure_logging(home, "door")
        catalog = build_catalog(config, with_jobs=False)
        key = build_key(home, (DOOR_FORMAT,))
        listener = _listen(paths)
    except TetherError as exc:
        with contextlib.suppress(OSError):  # the starter gave up waiting
            os.write(ready_fd, encode(_error(exc.code, exc.message)))
        # Ended at once, the pipe still open: its close is this process's end, which the starter
        # waits for (nothing of a command that failed outlives it).
        os._exit(2)
    # The log file has what this process says from now on; its starter's output is gone.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    logger.info("serving the command line of %s (pid %d)", home, os.getpid())
    asyncio.run(DoorServer(catalog, paths, key, config.cli.door_idle_seconds).run(listener, ready_fd))
    return 0


def main(argv: list[str]) -> int:
    """``python -m tether.cli.door.server --ready-fd N HOME`` (``tether.cli.door.client`` runs it)."""
    if len(argv) != 3 or argv[0] != "--ready-fd" or not argv[1].isdigit():
        print(
            "usage: python -m tether.cli.door.server --ready-fd N HOME (the tether command starts it)",
            file=sys.stderr,
        )
        return 2
    if os.fork() > 0:
        os._exit(0)  # the server is nobody's child: the command that started it need not reap it
    return serve(Path(argv[2]), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
