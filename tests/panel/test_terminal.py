"""The browser terminal's client and the shells face's terminal plumbing on a real tmux server
(no browser; the session is made by hand, as a shell tether did not open)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import struct
import subprocess
import termios
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from tether.errors import NotFoundError, UsageError
from tether.panel.terminal import PanelTerminal, client
from tether.shells import (
    Shells,
    first_paint,
    mark_user_input,
    prepare_attach,
    terminal_clients,
    user_input_stamp,
    window_size,
)
from tether.shells.tmux.gate import Gate

SHELL = "dsh-t3st01"


def _tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def shell(tether_home: Path) -> str:
    _tmux(
        tether_home,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        SHELL,
        "-x",
        "120",
        "-y",
        "32",
        "bash --norc",
    )
    _tmux(tether_home, "set-option", "-g", "status", "off")
    return SHELL


async def _read_until(term: PanelTerminal, needle: bytes, seen: bytearray) -> None:
    with anyio.fail_after(HANG_S):
        while needle not in seen:
            chunk = await term.read()
            assert chunk, f"client exited before {needle!r} appeared; saw {bytes(seen[-400:])!r}"
            seen += chunk


def _queued(tty: int) -> int:
    """Bytes a terminal holds for its reader (a canonical one counts only complete lines)."""
    return struct.unpack("i", fcntl.ioctl(tty, termios.FIONREAD, b"\0\0\0\0"))[0]


async def _drain(term: PanelTerminal) -> None:
    while await term.read():
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_attach_type_resize_detach_restores_size(shell: str, home_shells: Shells) -> None:
    term = await PanelTerminal.open(shells=home_shells, shell_id=shell, cols=90, rows=25)
    seen = bytearray()
    try:
        await _read_until(term, b"bash-", seen)  # the prompt, drawn by the attach redraw
        assert await terminal_clients(home_shells, shell) == 1
        assert await window_size(home_shells, shell) == (90, 25)

        await term.write(b"echo typed-$((6*7))\r")
        await _read_until(term, b"typed-42", seen)

        term.resize(100, 30)
        with anyio.fail_after(HANG_S):
            while await window_size(home_shells, shell) != (100, 30):
                await term.read()  # the redraw after SIGWINCH
    finally:
        await term.aclose()
    assert not _alive(term.pid)
    assert await terminal_clients(home_shells, shell) == 0
    assert await window_size(home_shells, shell) == (120, 32)

    # The next attach still drives the size (the restore did not leave the window pinned).
    again = await PanelTerminal.open(shells=home_shells, shell_id=shell, cols=80, rows=20)
    try:
        with anyio.fail_after(HANG_S):
            while await window_size(home_shells, shell) != (80, 20):
                await again.read()
    finally:
        await again.aclose()


async def test_input_written_before_the_client_attached_arrives_whole(
    tether_home: Path, home_shells: Shells, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paste sent as soon as the terminal opens (a page's first message) reached the PTY before
    the tmux client had attached and made it raw: the canonical line discipline kept 4095 bytes of
    a line and dropped the rest (a loaded machine lost ~20 KiB in the middle of a 1 MiB paste)."""
    pasted = tether_home / "got.txt"
    catcher = f"stty raw -echo; exec cat > {pasted}"  # every byte the pane gets, written down
    _tmux(tether_home, "-f", "/dev/null", "new-session", "-d", "-s", SHELL, "-x", "120", "-y", "32", catcher)
    with anyio.fail_after(HANG_S):
        while not pasted.exists():
            await anyio.sleep(0.02)
    server = int(_tmux(tether_home, "display-message", "-p", "#{pid}"))
    paste = b"y" * (1 << 20) + b"\rEND"  # more than the kernel buffers for a reader; then Enter

    async def prepare_then_stop(shells: Shells, shell_id: str) -> None:
        await prepare_attach(shells, shell_id)
        # The server stopped before the client starts: it cannot take the terminal and make it raw.
        os.kill(server, signal.SIGSTOP)

    monkeypatch.setattr(client, "prepare_attach", prepare_then_stop)
    try:
        term = await PanelTerminal.open(shells=home_shells, shell_id=SHELL, cols=90, rows=25)
    except BaseException:
        os.kill(server, signal.SIGCONT)
        raise
    try:
        tty = os.open(os.readlink(f"/proc/{term.pid}/fd/0"), os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            assert not termios.tcgetattr(tty)[3] & (termios.ICANON | termios.ECHO)
            writing = anyio.Event()
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    await term.write(paste)
                    writing.set()

                tg.start_soon(write)
                tg.start_soon(_drain, term)  # what the client draws once attached
                # Until the paste was all taken (a line discipline that drops what it cannot
                # keep), or the terminal holds the first of it for the client to read (raw).
                with anyio.fail_after(HANG_S):
                    while not writing.is_set() and not _queued(tty):
                        await anyio.sleep(0.02)
                os.kill(server, signal.SIGCONT)
                with anyio.fail_after(HANG_S):
                    while not pasted.read_bytes().endswith(b"END"):
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        finally:
            os.close(tty)
    finally:
        os.kill(server, signal.SIGCONT)
        await term.aclose()
    assert pasted.read_bytes() == paste


async def test_history_and_user_input_stamp(tether_home: Path, shell: str, home_shells: Shells) -> None:
    _tmux(tether_home, "send-keys", "-t", f"={shell}:", "seq 1 200", "Enter")
    with anyio.fail_after(HANG_S):
        # A screen line that is just "200": seq has printed it (the echoed command line holds
        # "200" too, before seq ran and anything scrolled into the history).
        while "200" not in _tmux(tether_home, "capture-pane", "-p", "-t", f"={shell}:").splitlines():
            await anyio.sleep(0.02)
    history = await first_paint(home_shells, shell, 1000)
    assert b"\r\n1\x1b[0m\r\n2\x1b[0m\r\n" in history
    # Only the lines above the screen: the screen itself is the client's own first redraw.
    assert b"\r\n200\x1b[0m" not in history
    assert await user_input_stamp(home_shells, shell) is None
    await mark_user_input(home_shells, shell, at_ms=1234)
    shown = _tmux(tether_home, "show-options", "-v", "-t", f"={shell}:", "@tether_user_input_at")
    assert shown.strip() == "1234" and await user_input_stamp(home_shells, shell) == 1234


async def test_client_ends_when_shell_closes(tether_home: Path, shell: str, home_shells: Shells) -> None:
    _tmux(tether_home, "new-session", "-d", "-s", "dsh-keep01")  # keep the server alive
    term = await PanelTerminal.open(shells=home_shells, shell_id=shell, cols=80, rows=24)
    try:
        _tmux(tether_home, "kill-session", "-t", f"={shell}")
        with anyio.fail_after(HANG_S):
            while await term.read():
                pass
    finally:
        await term.aclose()
    assert not _alive(term.pid)


async def test_bad_and_missing_shell_ids(shell: str, home_shells: Shells) -> None:
    with pytest.raises(UsageError, match="dsh-ab12cd"):
        await PanelTerminal.open(shells=home_shells, shell_id="dsh-x;kill-server", cols=80, rows=24)
    with pytest.raises(NotFoundError):
        await PanelTerminal.open(shells=home_shells, shell_id="dsh-nope00", cols=80, rows=24)


async def test_a_connect_waits_until_tmux_has_dropped_a_leaving_terminal(
    tether_home: Path, shell: str, home_shells: Shells
) -> None:
    """tmux ≤ 3.6 tells every control client that a terminal left, and dies if one of them is
    still connecting (``tether.shells.tmux.gate``): while a person's terminal ends, a control
    client of another process may connect only once tmux no longer counts the terminal."""
    term = await PanelTerminal.open(shells=home_shells, shell_id=shell, cols=90, rows=25)
    await _read_until(term, b"bash-", bytearray())
    assert await terminal_clients(home_shells, shell) == 1
    closing = asyncio.ensure_future(term.aclose())
    await asyncio.sleep(0)  # the terminal's end has taken the gate
    held = await asyncio.wait_for(Gate(tether_home / "tmux.gate").acquire(exclusive=True), HANG_S)
    try:
        assert await terminal_clients(home_shells, shell) == 0
    finally:
        held.release()
    await asyncio.wait_for(closing, HANG_S)
