"""tmux before 3.7 dies when it notifies a control client that is still identifying itself
(``tether.shells.tmux.gate``): tether processes that connect, end and open or close shells at the
same moment must not kill the server their shells live in."""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path

import pytest

from tether.shells.tmux import gate as gate_module
from tether.shells.tmux.commands import notifies
from tether.shells.tmux.control import ControlClient
from tether.shells.tmux.gate import Gate


def alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


async def test_processes_that_connect_end_and_open_shells_at_once_leave_the_server_alive(
    tether_home: Path,
) -> None:
    """Control clients started and ended in a loop by three "processes" while a fourth opens and
    closes sessions: without the gate tmux 3.3a died here within a second or two (SIGSEGV at
    0x20, every shell lost); each client is its own ``tmux -C`` child, as each tether process's is."""
    socket, gate = tether_home / "tmux.sock", tether_home / "tmux.gate"
    owner = ControlClient(socket, gate=gate)
    server = int((await owner.run("display-message", "-p", "#{pid}"))[0])
    stop = time.monotonic() + 4.0
    connects = 0

    async def churn() -> None:
        nonlocal connects
        while time.monotonic() < stop and alive(server):
            client = ControlClient(socket, gate=gate)
            try:
                await client.run("display-message", "-p", "x")
                connects += 1
            finally:
                await client.close()

    async def sessions() -> None:
        n = 0
        while time.monotonic() < stop and alive(server):
            n += 1
            await owner.run("new-session", "-d", "-s", f"g{n}", "sleep 30")
            await owner.run("kill-session", "-t", f"=g{n}")

    try:
        await asyncio.gather(churn(), churn(), churn(), sessions())
        assert alive(server), f"the tmux server died after {connects} connects"
        assert int((await owner.run("display-message", "-p", "#{pid}"))[0]) == server
        assert connects >= 10
    finally:
        await owner.close()


def test_which_commands_take_the_gate() -> None:
    assert notifies([("new-session", "-d", "-s", "x")])
    assert notifies([("display-message", "-p", "x"), ("kill-session", "-t", "=x")])
    assert notifies([("send-keys", "-X", "-t", "%1", "cancel")])
    assert notifies([("set-buffer", "-b", "b", "--", "text")])
    assert not notifies([("send-keys", "-t", "%1", "-l", "--", "echo hi")])
    assert not notifies([("list-panes", "-a", "-F", "#{pane_id}"), ("capture-pane", "-p")])


async def test_shared_holders_never_wait_for_each_other_and_a_connect_waits_for_them(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "tmux.gate")
    first = await gate.acquire(exclusive=False)
    second = await asyncio.wait_for(gate.acquire(exclusive=False), 1.0)  # no wait at all
    connect = asyncio.ensure_future(gate.acquire(exclusive=True))
    await asyncio.sleep(0.05)
    assert not connect.done()
    first.release()
    second.release()
    (await asyncio.wait_for(connect, 5.0)).release()
    assert (os.stat(tmp_path / "tmux.gate").st_mode & 0o777) == 0o600


async def test_a_waiting_connect_goes_before_later_shell_calls(tmp_path: Path) -> None:
    """Shell calls that follow each other without a pause (each holding the gate shared) must not
    keep a new process out: once a connect waits, later calls wait behind it."""
    gate = Gate(tmp_path / "tmux.gate")
    first = await gate.acquire(exclusive=False)
    connect = asyncio.ensure_future(gate.acquire(exclusive=True))
    await asyncio.sleep(0.05)
    later = asyncio.ensure_future(gate.acquire(exclusive=False))
    await asyncio.sleep(0.05)
    assert not connect.done() and not later.done()
    first.release()
    held = await asyncio.wait_for(connect, 5.0)
    await asyncio.sleep(0.05)
    assert not later.done()
    held.release()
    (await asyncio.wait_for(later, 5.0)).release()


async def test_a_holder_that_never_lets_go_delays_but_never_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stopped while holding the lock costs the others WAIT_S, then they go on."""
    monkeypatch.setattr(gate_module, "WAIT_S", 0.2)
    path = tmp_path / "tmux.gate"
    stuck = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(stuck, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        held = await asyncio.wait_for(Gate(path).acquire(exclusive=False), 5.0)
        assert time.monotonic() - started >= 0.2
        held.release()
    finally:
        os.close(stuck)


async def test_a_gate_that_cannot_be_opened_does_not_stop_the_shells(tmp_path: Path) -> None:
    held = await Gate(tmp_path / "missing" / "tmux.gate").acquire(exclusive=True)
    held.release()
    held.release()  # idempotent
