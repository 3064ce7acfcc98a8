"""A browser terminal's client: the shell host's terminal client running in a PTY the panel owns.

Invariants:

- One ``PanelTerminal`` is one real, read-write terminal client attached to one shell — the argv
  its host gives for a person (``attach_argv``: ``tmux attach`` on a local host; a remote host
  attaches the same way). tmux therefore reports the shell as attached, and a person's keystrokes
  reach the pane exactly as they would from a terminal emulator (the bytes xterm.js produces are
  written to the PTY master).
- The client runs in a session of its own with the PTY as its controlling terminal (``setsid
  --ctty``), so a ``TIOCSWINSZ`` on the master reaches it as ``SIGWINCH``: the browser's size is
  the client's size, and with tmux's default ``window-size latest`` the most recently active client
  sizes the window. The size the window had before the first browser attached is put back when the
  last one leaves (``prepare_attach`` notes it, ``restore_size`` gives it back).
- The PTY takes input raw from the start (``_raw_input``): the client puts its terminal in raw mode
  only once it has attached, and a paste written before then met a canonical line discipline, which
  keeps 4095 bytes of a line without a newline and drops the rest (and echoes them). Raw, the
  kernel holds what the client has not read yet and the write waits for room.
- ``aclose`` always ends and reaps the client: closing the master hangs the PTY up (``SIGHUP`` to
  the client's session, which detaches it); a client still alive after a grace period is killed.
  Waiters on the master fd are woken (``anyio.notify_closing``) before the fd is closed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import termios
from contextlib import suppress

import anyio
from anyio.abc import Process

from tether.errors import TetherError
from tether.shells import (
    Shells,
    attach_argv,
    check_shell_id,
    prepare_attach,
    restore_size,
    terminal_ending,
)

_READ_CHUNK = 64 * 1024
_EXIT_GRACE_S = 2.0
MIN_COLS, MAX_COLS = 20, 1000
MIN_ROWS, MAX_ROWS = 5, 500


def clamp_size(cols: int, rows: int) -> tuple[int, int]:
    return max(MIN_COLS, min(MAX_COLS, cols)), max(MIN_ROWS, min(MAX_ROWS, rows))


def _set_winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _raw_input(fd: int) -> None:
    """The terminal's input side as the client sets it once attached (tmux's ``tty_start_tty``):
    no line editing, echo, signal keys, flow control or CR/NL translation. Output processing is
    left as it is, for what the client prints before it attaches and after it detaches."""
    attrs = termios.tcgetattr(fd)
    attrs[0] &= ~(
        termios.IXON
        | termios.IXOFF
        | termios.ICRNL
        | termios.INLCR
        | termios.IGNCR
        | termios.IMAXBEL
        | termios.ISTRIP
    )
    attrs[3] &= ~(termios.ICANON | termios.ECHO | termios.ECHONL | termios.ISIG | termios.IEXTEN)
    attrs[6][termios.VMIN] = 1
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def _client_env() -> dict[str, str]:
    # A tmux client needs only a terminal type; nothing of the panel's own environment (tokens,
    # TMUX of an enclosing tmux) should reach the server through update-environment. ssh (the
    # client of a remote shell) also finds its keys through HOME and the agent's socket.
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor", "LANG": "C.UTF-8"}
    for name in ("PATH", "HOME", "SSH_AUTH_SOCK"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class PanelTerminal:
    """A shell's terminal client in a PTY: ``read`` what it draws, ``write`` what a person types."""

    def __init__(self, *, shell_id: str, shells: Shells, master: int, process: Process) -> None:
        self.shell_id = shell_id
        self.shells = shells
        self._master = master
        self._process = process
        self._closed = False

    @classmethod
    async def open(cls, *, shells: Shells, shell_id: str, cols: int, rows: int) -> PanelTerminal:
        check_shell_id(shell_id)
        cols, rows = clamp_size(cols, rows)
        await prepare_attach(shells, shell_id)
        master, slave = os.openpty()
        try:
            _set_winsize(slave, cols, rows)
            _raw_input(slave)
            os.set_blocking(master, False)
            argv = ["setsid", "--ctty", *attach_argv(shells, shell_id)]
            process = await anyio.open_process(
                argv, stdin=slave, stdout=slave, stderr=slave, env=_client_env()
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return cls(shell_id=shell_id, shells=shells, master=master, process=process)

    async def read(self) -> bytes:
        """The client's next output; ``b""`` once it has exited (detached, shell closed, or killed)."""
        while not self._closed:
            try:
                return os.read(self._master, _READ_CHUNK)
            except BlockingIOError:
                pass
            except OSError as exc:
                # EIO: every slave fd is closed, i.e. the client exited.
                if exc.errno == errno.EIO:
                    return b""
                raise
            try:
                await anyio.wait_readable(self._master)
            except anyio.ClosedResourceError:
                return b""
        return b""

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self._closed:
            try:
                written = os.write(self._master, view)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                if exc.errno == errno.EIO:
                    return
                raise
            view = view[written:]
            if view:
                try:
                    await anyio.wait_writable(self._master)
                except anyio.ClosedResourceError:
                    return

    def resize(self, cols: int, rows: int) -> tuple[int, int]:
        cols, rows = clamp_size(cols, rows)
        if not self._closed:
            _set_winsize(self._master, cols, rows)
        return cols, rows

    @property
    def pid(self) -> int:
        return self._process.pid

    async def aclose(self) -> None:
        """Detach (hang up the PTY), reap the client, and restore the window size if unwatched."""
        with anyio.CancelScope(shield=True):
            # tmux tells its control clients that this one left: not while one connects.
            async with terminal_ending(self.shells, self.shell_id):
                if not self._closed:
                    self._closed = True
                    anyio.notify_closing(self._master)
                    os.close(self._master)
                with anyio.move_on_after(_EXIT_GRACE_S):
                    await self._process.wait()
                if self._process.returncode is None:
                    with suppress(ProcessLookupError):
                        os.kill(self._process.pid, signal.SIGKILL)
                    await self._process.wait()
            # The shell (or the whole tmux server) may be gone by now; nothing to restore then.
            with suppress(TetherError):
                await restore_size(self.shells, self.shell_id)
