"""The browser terminal's client and the shells face's terminal plumbing on a real tmux server
(no browser; the session is made by hand, as a shell tether did not open)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from tether.errors import NotFoundError, UsageError
from tether.panel.terminal import PanelTerminal
from tether.shells import (
    Shells,
    first_paint,
    mark_user_input,
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
