"""Closing or respawning a remote shell ends what it started there, as on the local host: its
background jobs, ``nohup``, ``setsid`` and disowned processes, one that ignores ``SIGTERM`` too —
and nothing of another shell on the same host."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
from shell_harness import call, open_shell, run, shell_client
from sshd_harness import RemoteHosts

from hang import HANG_S


def _pids(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (the host is this machine)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


def _running(marker: str) -> bool:
    return bool(_pids(marker))


@contextlib.contextmanager
def _ended_anyway(markers: list[str]) -> Iterator[None]:
    """A failing test leaves none of its escapees running."""
    try:
        yield
    finally:
        for pid in (p for m in markers for p in _pids(m)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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
    left = ["sleep\x004343.1", "sleep\x004343.2", "sleep\x004343.3", "sleep\x004343.4"]
    other = "sleep\x004343.9"
    with _ended_anyway([*left, other]):
        await _closing(tether_home, left, other)


async def _closing(tether_home: Path, left: list[str], other: str) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        neighbour = await open_shell(client, host="box-a")
        await run(
            client,
            shell,
            "nohup sleep 4343.1 >/dev/null 2>&1 & setsid sleep 4343.2 >/dev/null 2>&1 & "
            "(trap '' TERM HUP; exec sleep 4343.3) >/dev/null 2>&1 & sleep 4343.4 & disown -a",
        )
        await run(client, neighbour, "sleep 4343.9 & disown")
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
    old = ["sleep\x004344.1", "sleep\x004344.2"]
    new = "sleep\x004344.5"
    with _ended_anyway([*old, new]):
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, host="box-a")
            await run(
                client, shell, "nohup sleep 4344.1 >/dev/null 2>&1 & setsid sleep 4344.2 >/dev/null 2>&1 &"
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
            await run(client, shell, "setsid sleep 4344.5 >/dev/null 2>&1 &")
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
    markers = [f"sleep\x004345.{i}" for i in range(8)]
    with _ended_anyway(markers):
        async with shell_client(tether_home) as client:
            _, data = await call(
                client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}] * 8}
            )
            shells = [t["shell"] for t in data["tasks"]]
            assert all(shells), data
            for i, shell in enumerate(shells):
                await run(client, shell, f"(trap '' TERM HUP; exec sleep 4345.{i}) >/dev/null 2>&1 & disown")
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
