"""Closing or respawning a remote shell ends what it started there, as on the local host: its
background jobs, ``nohup``, ``setsid`` and disowned processes, one that ignores ``SIGTERM`` too —
and nothing of another shell on the same host. What it cannot end (a process in a frozen cgroup)
or could not ask the host to end (the connection gone mid-sweep), the close says.

The host is this machine, where other test runs may run these very tests at once: each process is
known by a ``sleep`` argument of its own (``unique_sleep_arg``), never by a fixed one another run
shares."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from shell_harness import call, open_shell, run, shell_client
from sshd_harness import RemoteHosts
from test_remote_network import _kill_master

from hang import HANG_MS, HANG_S
from proc_probe import alive_with, freezer, kill_all, unique_sleep_arg


def _running(token: str) -> bool:
    return bool(alive_with(token))


@contextlib.contextmanager
def _ended_anyway(tokens: list[str]) -> Iterator[None]:
    """A failing test leaves none of its escapees running."""
    try:
        yield
    finally:
        kill_all([pid for token in tokens for pid in alive_with(token)])


async def _close(client: object, shell: str) -> dict[str, object]:
    _, data = await call(
        client,  # type: ignore[arg-type]
        "shell_manage",
        {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]},
    )
    task: dict[str, object] = data["tasks"][0]
    return task


async def test_closing_a_remote_shell_ends_what_it_started_there(
    tether_home: Path, remote: RemoteHosts
) -> None:
    remote.add("box-a")
    left = [unique_sleep_arg() for _ in range(4)]
    other = unique_sleep_arg()
    with _ended_anyway([*left, other]):
        await _closing(tether_home, left, other)


async def _closing(tether_home: Path, left: list[str], other: str) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        neighbour = await open_shell(client, host="box-a")
        await run(
            client,
            shell,
            f"nohup sleep {left[0]} >/dev/null 2>&1 & setsid sleep {left[1]} >/dev/null 2>&1 & "
            f"(trap '' TERM HUP; exec sleep {left[2]}) >/dev/null 2>&1 & sleep {left[3]} & disown -a",
        )
        await run(client, neighbour, f"sleep {other} & disown")
        with anyio.fail_after(HANG_S):
            while not all(map(_running, [*left, other])):
                await anyio.sleep(0.02)
        task = await _close(client, shell)
        assert task["ok"] is True, task
        # The close answered once they had exited (the one ignoring SIGTERM after the grace).
        assert [m for m in left if _running(m)] == [], task
        # Another shell's processes on the same host are not touched; they end with their shell.
        assert _running(other)
        task = await _close(client, neighbour)
        assert task["ok"] is True and not _running(other), task


async def test_respawning_a_remote_shell_ends_what_the_old_shell_started(
    tether_home: Path, remote: RemoteHosts
) -> None:
    remote.add("box-a")
    old = [unique_sleep_arg() for _ in range(2)]
    new = unique_sleep_arg()
    with _ended_anyway([*old, new]):
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, host="box-a")
            await run(
                client,
                shell,
                f"nohup sleep {old[0]} >/dev/null 2>&1 & setsid sleep {old[1]} >/dev/null 2>&1 &",
            )
            with anyio.fail_after(HANG_S):
                while not all(map(_running, old)):
                    await anyio.sleep(0.02)
            _, data = await call(
                client,
                "shell_manage",
                {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "respawn"}}]},
            )
            assert data["tasks"][0]["ok"] is True, data
            assert [m for m in old if _running(m)] == [], data
            # The new shell (same marker) is not touched: it runs, and what it starts ends at close.
            await run(client, shell, f"setsid sleep {new} >/dev/null 2>&1 &")
            assert (await run(client, shell, "echo alive"))["lines"] == ["alive"]
            with anyio.fail_after(HANG_S):
                while not _running(new):
                    await anyio.sleep(0.02)
            assert (await _close(client, shell))["ok"] is True
            assert not _running(new)


async def test_shells_closed_together_each_end_what_they_started(
    tether_home: Path, remote: RemoteHosts
) -> None:
    # Eight shells, each with a process that ignores SIGTERM (so each sweep takes its whole grace),
    # closed in one call: none of them outlives its shell.
    remote.add("box-a")
    markers = [unique_sleep_arg() for _ in range(8)]
    with _ended_anyway(markers):
        async with shell_client(tether_home) as client:
            _, data = await call(
                client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}] * 8}
            )
            shells = [t["shell"] for t in data["tasks"]]
            assert all(shells), data
            for i, shell in enumerate(shells):
                await run(
                    client, shell, f"(trap '' TERM HUP; exec sleep {markers[i]}) >/dev/null 2>&1 & disown"
                )
            with anyio.fail_after(HANG_S):
                while not all(map(_running, markers)):
                    await anyio.sleep(0.02)
            _, data = await call(
                client,
                "shell_manage",
                {
                    "tasks": [{"target": {"sessions": s}, "action": {"kind": "close"}} for s in shells],
                    "concurrency": 8,
                },
            )
            assert [t["ok"] for t in data["tasks"]] == [True] * 8, data
            assert [m for m in markers if _running(m)] == [], data


def _signalled(pid: int) -> bool:
    """A fatal signal waits on ``pid`` (frozen, it cannot act on it): a sweep reached it."""
    status = Path(f"/proc/{pid}/status").read_text()
    pending = {
        k: int(v, 16)
        for k, _, v in (line.partition(":\t") for line in status.splitlines())
        if k.endswith("Pnd")
    }
    return bool(pending["SigPnd"] & (1 << 8) or pending["ShdPnd"] & (1 << 14))  # SIGKILL, SIGTERM


async def _frozen_close(
    tether_home: Path, remote: RemoteHosts, freeze: Callable[[int], None], *, drop: bool, kind: str = "close"
) -> tuple[str, dict[str, Any], int, str]:
    """Close (or ``kind`` respawn) a remote shell one of whose processes is frozen (and with
    ``drop``, kill the connection's master while the sweep is under way); the call's text and
    task, the pid, the token."""
    # Dropping mid-sweep: a grace as long as the hang guard keeps the sweep under way (its SIGTERM
    # sent, its SIGKILL not yet) until the master is gone, however slow the machine.
    remote.extra_config = f"[shell]\ngrace_ms = {HANG_MS if drop else 100}\n"
    remote.add("box-a")
    token, ended = unique_sleep_arg(), unique_sleep_arg()
    with _ended_anyway([token, ended]):
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, host="box-a")
            await run(client, shell, f"sleep {token} & sleep {ended} &")
            with anyio.fail_after(HANG_S):
                while not (_running(token) and _running(ended)):
                    await anyio.sleep(0.02)
            [pid] = alive_with(token)
            freeze(pid)
            answer: list[tuple[str, dict[str, Any]]] = []

            async def closing() -> None:
                answer.append(
                    await call(
                        client,
                        "shell_manage",
                        {"tasks": [{"target": {"sessions": shell}, "action": {"kind": kind}}]},
                    )
                )

            async with anyio.create_task_group() as group:
                group.start_soon(closing)
                if drop:
                    with anyio.fail_after(HANG_S):
                        while not _signalled(pid):
                            await anyio.sleep(0.02)
                    _kill_master(remote, "box-a")
            [(text, data)] = answer
            task: dict[str, Any] = data["tasks"][0]
            assert task["ok"] is True, data
            if not drop:
                assert not _running(ended), data  # the rest ended as ever
            return text, task, pid, token


async def test_closing_a_remote_shell_says_which_of_its_processes_outlived_the_sweep(
    tether_home: Path, remote: RemoteHosts
) -> None:
    with freezer() as freeze:
        text, task, pid, token = await _frozen_close(tether_home, remote, freeze, drop=False)
    assert task["data"]["stillRunning"] == [{"pid": pid, "command": f"sleep {token}"}], task
    assert "notEnded" not in task["data"]
    assert f"still running after SIGKILL: pid {pid} (sleep {token})" in text


async def test_respawning_a_remote_shell_says_which_of_its_processes_outlived_the_sweep(
    tether_home: Path, remote: RemoteHosts
) -> None:
    # As a close: a respawn said nothing of it (only the tether process's log did).
    with freezer() as freeze:
        text, task, pid, token = await _frozen_close(tether_home, remote, freeze, drop=False, kind="respawn")
    assert task["data"]["stillRunning"] == [{"pid": pid, "command": f"sleep {token}"}], task
    assert "notEnded" not in task["data"]
    assert f"still running after SIGKILL: pid {pid} (sleep {token})" in text


async def test_a_remote_close_whose_connection_drops_mid_sweep_says_so(
    tether_home: Path, remote: RemoteHosts
) -> None:
    with freezer() as freeze:
        text, task, _, _ = await _frozen_close(tether_home, remote, freeze, drop=True)
    assert task["data"]["stillRunning"] == [], task
    assert task["data"]["notEnded"].startswith("host box-a did not answer while they were ended"), task
    assert "could not end what the shell started: host box-a did not answer" in text
