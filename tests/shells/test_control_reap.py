"""The tmux server a control client starts is never handed to us, although tether is a subreaper: it
outlives us, and what its shells orphan would otherwise become zombies of ours that nothing reaps
(fifteen after five runs of a double fork in a shell). A server that still ends as a zombie of
ours (one adopted some other way) is collected by the client."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until
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


def _has_a_shell_parent(pid: int) -> bool:
    st = stat_of(pid)
    try:
        return st is not None and Path(f"/proc/{st[1]}/comm").read_text().strip() in ("sh", "bash", "dash")
    except OSError:
        return False


async def server_pid(client: ControlClient) -> int:
    pid = int((await client.run("display-message", "-p", "#{pid}"))[0])
    assert stat_of(pid) is not None
    return pid


async def test_neither_the_server_nor_what_its_shells_orphan_becomes_ours(tether_home: Path) -> None:
    assert become_subreaper()
    token = unique_sleep_arg()
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    try:
        server = await server_pid(client)
        assert stat_of(server)[1] != os.getpid()  # type: ignore[index]
        # A double fork in a shell: the sleep's parent (a subshell) exits at once, orphaning it.
        await client.run("new-session", "-d", "-s", "orphans", f"(sleep {token} &); exec sleep 1000")
        assert wait_until(
            lambda: len(alive_with(token)) == 1 and not _has_a_shell_parent(alive_with(token)[0])
        )
        [orphan] = alive_with(token)
        assert stat_of(orphan)[1] != os.getpid()  # type: ignore[index]
    finally:
        kill_all(alive_with(token))
        await client.close()


async def kill_and_wait_ended(client: ControlClient, pid: int) -> None:
    with contextlib.suppress(SessionError):
        await client.run("kill-server")
    with anyio.fail_after(HANG_S):
        while (st := stat_of(pid)) is not None and st[0] != "Z":
            await anyio.sleep(0.01)


def _not_ours(pid: int) -> bool:
    """Gone, or (a zombie) another process's child: nothing of ours to collect."""
    st = stat_of(pid)
    return st is None or st[1] != os.getpid()


async def test_an_ended_server_leaves_no_zombie_of_ours_on_restart_and_on_close(tether_home: Path) -> None:
    assert become_subreaper()
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    try:
        first = await server_pid(client)
        await kill_and_wait_ended(client, first)
        second = await server_pid(client)  # a new client (and server)
        assert second != first and _not_ours(first)
        await kill_and_wait_ended(client, second)
    finally:
        await client.close()
    assert _not_ours(second)


def test_reap_adopted_leaves_running_and_foreign_processes_alone() -> None:
    assert not reap_adopted(os.getpid())  # not a child, not a zombie
    assert not reap_adopted(1)
    assert not reap_adopted(0)
