"""The tmux server daemonizes and, tether being the subreaper, is handed to us: when it ends, the
control client collects it (no zombie is left in a long-lived tether process)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio

from hang import HANG_S
from tether.process.tree import become_subreaper, reap_adopted
from tether.shells.tmux.control import ControlClient, SessionError


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None once it is gone (reaped)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[1])


async def server_pid(client: ControlClient) -> int:
    pid = int((await client.run("display-message", "-p", "#{pid}"))[0])
    assert stat_of(pid) is not None and stat_of(pid)[1] == os.getpid()  # type: ignore[index]
    return pid


async def kill_and_wait_ended(client: ControlClient, pid: int) -> None:
    with contextlib.suppress(SessionError):
        await client.run("kill-server")
    with anyio.fail_after(HANG_S):
        while (st := stat_of(pid)) is not None and st[0] != "Z":
            await anyio.sleep(0.01)


async def test_an_ended_server_is_reaped_on_restart_and_on_close(tether_home: Path) -> None:
    assert become_subreaper()
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    try:
        first = await server_pid(client)
        await kill_and_wait_ended(client, first)
        second = await server_pid(client)  # a new client (and server): the old server is collected
        assert second != first and stat_of(first) is None
        await kill_and_wait_ended(client, second)
    finally:
        await client.close()
    assert stat_of(second) is None


def test_reap_adopted_leaves_running_and_foreign_processes_alone() -> None:
    assert not reap_adopted(os.getpid())  # not a child, not a zombie
    assert not reap_adopted(1)
    assert not reap_adopted(0)
