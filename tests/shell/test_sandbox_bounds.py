"""A confined command's processes and memory are bounded (``[sandbox].max_processes``, ``memory_mb``).

Attacks, through the official MCP client, as root: a fork bomb and a process that forks until the
kernel refuses, a memory hog, a command writing itself into another cgroup — in a one-shot command
and in a persistent shell. Each stops at the configured bound (30 processes, 64 MiB here) inside
the command's own group, the result says so, tether and the shell go on, and every group is gone
afterwards (after a crash too: the next tether process removes what a killed one left).

Safe on a shared machine even if the bounds failed: the whole test — this process, the servers it
starts, their tmux server — runs in an outer group of its own (``outer``: at most 400 processes and
1 GiB), made before anything starts and removed at the end, once it is empty.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from sandbox_mcp_harness import bash, open_task, run_to_exit, server, text_of

from tether.process import bounds
from tether.shell.sandbox import SandboxSettings

pytestmark = pytest.mark.timeout(240)

# A command over its timeout is killed (the fork bomb), not moved to a background job.
_CONFIG = "[tools]\npromote_on_timeout = false\n[sandbox]\nmax_processes = 30\nmemory_mb = 64\n"
_BOUND = "at most 30 processes and 64 MiB of memory"
# Forks children that wait, until the kernel refuses one; never more than 200 (a bound that failed
# still ends here), and the children go when it exits.
_FORKER = (
    'python3 -c "import os,sys,signal\nkids=[]\nr,w=os.pipe()\n'
    "for n in range(200):\n"
    "    try:\n        pid=os.fork()\n"
    "    except OSError as e:\n        print('refused after', n, e.strerror); break\n"
    "    if pid==0:\n        os.close(w); os.read(r,1); os._exit(0)\n    kids.append(pid)\n"
    "else:\n    print('never refused')\n"
    'os.close(w)\n[os.waitpid(k,0) for k in kids]"'
)
_HOG = "python3 -c 'b = bytearray(256 << 20); print(\"not killed\")'"


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


@pytest.fixture
def outer() -> Iterator[dict[str, Path]]:
    """This test process in groups of its own (pids, memory), which everything it starts inherits;
    at the end, asserts nothing was left in them, and removes them."""
    found = bounds.support()
    if set(found.dirs) != set(bounds.CONTROLLERS):
        pytest.skip(f"no writable cgroup v1 pids and memory controllers here: {found.reason}")
    groups = {c: base / f"tether-test-{os.getpid()}" for c, base in found.dirs.items()}
    for controller, group in groups.items():
        group.mkdir()
        _write(
            group / ("pids.max" if controller == "pids" else "memory.limit_in_bytes"),
            str(400 if controller == "pids" else 1 << 30),
        )
        _write(group / "cgroup.procs", str(os.getpid()))
    try:
        yield groups
    finally:
        for controller in groups:
            _write(found.dirs[controller] / "cgroup.procs", str(os.getpid()))
        left = {str(p) for group in groups.values() for p in group.iterdir() if p.is_dir()}
        for group in groups.values():
            for leftover in sorted(p for p in group.rglob("*") if p.is_dir())[::-1]:
                bounds.empty(leftover)
                leftover.rmdir()
            bounds.empty(group)
            group.rmdir()
        assert not left, f"groups left behind: {left}"


@pytest.fixture
def bounded_home(outer: dict[str, Path], tether_home: Path) -> Path:
    """``tether_home`` (set up inside ``outer``, so its tmux server ends before the check)."""
    (tether_home / "config.toml").write_text(_CONFIG)
    return tether_home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def _limits(data: dict[str, Any]) -> dict[str, str]:
    return {d["target"]: d["detail"] for d in data["sandbox"]["denials"] if d["kind"] == "limit"}


def _groups(outer: dict[str, Path]) -> list[str]:
    return sorted(str(p) for group in outer.values() for p in group.rglob("*") if p.is_dir())


async def _run(client: Client, shell: str, command: str) -> dict[str, Any]:
    return await run_to_exit(client, shell, command, past_guard=True)  # the sandbox alone must hold


async def test_a_fork_bomb_in_a_one_shot_command_stops_at_the_bound(
    bounded_home: Path, home: Path, outer: dict[str, Path]
) -> None:
    async with server(bounded_home, home, "--sandbox") as client:
        text, data = await bash(client, _FORKER)
        assert "refused after" in text and "Resource temporarily unavailable" in text, text
        forked = int(text.split("refused after ")[1].split()[0])
        assert forked < 30, text  # bubblewrap, its init, the tracer, bash and python hold the rest
        assert data["sandbox"]["bounds"] == _BOUND, data
        assert "processes" in _limits(data) and "[sandbox limit: the bound of 30 processes" in text, text
        # The classic bomb: bash functions forking themselves without end. The command waits, with
        # builtins, until the kernel has refused one of the bomb's forks (bash says so on the
        # stderr they share, and retries), or bash itself exits when a fork of its own is refused
        # for good; then tether ends what is left. Either way a fork was refused first. (Waiting
        # for 29 processes instead could end before any was: the bomb's processes exit as soon as
        # they have forked, and on a loaded machine the count could be met with no fork refused.)
        full = (
            ":(){ :|:& }; : 2>/tmp/bomb; "
            "until read -r said </tmp/bomb && [[ $said == *'temporarily unavailable'* ]]; do :; done; "
            "echo full"
        )
        text, data = await bash(client, full)
        assert "processes" in _limits(data), text
        # tether goes on, and so does the next command.
        text, data = await bash(client, "echo after")
        assert text.startswith("after") and not _limits(data), text
    assert _groups(outer) == []


async def test_a_memory_hog_in_a_one_shot_command_is_killed_at_the_bound(
    bounded_home: Path, home: Path, outer: dict[str, Path]
) -> None:
    async with server(bounded_home, home, "--sandbox") as client:
        text, data = await bash(client, _HOG)
        assert "not killed" not in text and data["exitCode"] == 137, text
        assert "memory" in _limits(data), text
        assert "[sandbox limit: the bound of 64 MiB of memory was reached: the kernel killed" in text, text
        # What a command keeps in its in-memory /tmp counts too.
        text, data = await bash(client, "head -c 200M /dev/zero > /tmp/fill; echo status=$?")
        assert "status=0" not in text and "memory" in _limits(data), text
        text, _ = await bash(client, "echo alive")
        assert text.startswith("alive"), text
    assert _groups(outer) == []


async def test_a_confined_command_cannot_leave_its_group(
    bounded_home: Path, home: Path, outer: dict[str, Path]
) -> None:
    """``/sys/fs/cgroup`` is read-only inside (and the command has no capability): writing its own
    pid into another group — the machine's root group, tether's — fails."""
    base = bounds.support().dirs["pids"]
    attempts = " ".join(
        f"echo $$ > {target} 2>/dev/null && echo LEFT {target} || echo refused {target};"
        for target in ("/sys/fs/cgroup/pids/cgroup.procs", f"{base}/cgroup.procs", f"{base}/tasks")
    )
    async with server(bounded_home, home, "--sandbox") as client:
        text, _ = await bash(client, attempts + " cat /proc/self/cgroup")
    assert "LEFT" not in text and text.count("refused") == 3, text
    assert "pids:/\n" in text, text  # its own cgroup namespace: it sees no path to climb from


async def test_a_confined_shell_is_bounded_and_its_group_goes_with_it(
    bounded_home: Path, home: Path, outer: dict[str, Path]
) -> None:
    async with server(bounded_home, home, "--sandbox") as client:
        task = await open_task(client)
        shell = str(task["shell"])
        state = await client.call_tool("shell_state", {})
        assert _BOUND in text_of(state), text_of(state)
        shell_groups = [p for p in _groups(outer) if "/tether-shell-" in p]
        assert len(shell_groups) == 2, _groups(outer)  # pids and memory

        out = await _run(client, shell, _FORKER)
        lines = "\n".join(out["lines"])
        assert "refused after" in lines and "Resource temporarily unavailable" in lines, out
        assert int(lines.split("refused after ")[1].split()[0]) < 30, lines
        assert "processes" in _limits(out), out

        out = await _run(client, shell, _HOG)
        assert "not killed" not in "\n".join(out["lines"]) and out["exitCode"] == 137, out
        assert set(_limits(out)) == {"memory"}, out  # each event is reported once
        out = await _run(client, shell, "echo still here")
        assert out["lines"][-1:] == ["still here"] and not _limits(out), out

        closed = await client.call_tool(
            "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert not closed.is_error, text_of(closed)
        assert not any(map(os.path.exists, shell_groups)), _groups(outer)
    assert _groups(outer) == []


def test_groups_a_killed_tether_left_are_removed_by_the_next(outer: dict[str, Path], tmp_path: Path) -> None:
    """SIGKILL a process while its bounded command runs: its groups stay (the kernel ends the
    command with the command container); the next tether process's first spawn removes them."""
    script = tmp_path / "spawner.py"
    script.write_text(
        "import asyncio, os, sys\n"
        "from tether.process.bounds import Bounds\n"
        "from tether.process.spawn import SpawnRequest, spawn\n"
        "async def main():\n"
        "    spawn(SpawnRequest(argv=('sleep', '600'), cwd='/', env=dict(os.environ),"
        " bounds=Bounds(processes=30, memory_mb=64) if sys.argv[1] == 'bounded' else None))\n"
        "    print('running', flush=True)\n"
        "    await asyncio.sleep(600 if sys.argv[1] == 'bounded' else 0)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    crashed = subprocess.Popen([sys.executable, str(script), "bounded"], stdout=subprocess.PIPE, env=env)
    try:
        assert crashed.stdout is not None and crashed.stdout.readline() == b"running\n"
        left = [group / f"tether-{crashed.pid}" / "b1" for group in outer.values()]
        assert all(path.is_dir() for path in left), _groups(outer)
    finally:
        crashed.send_signal(signal.SIGKILL)
        crashed.wait()
    subprocess.run([sys.executable, str(script), "plain"], env=env, check=True, capture_output=True)
    assert _groups(outer) == []


def test_bounds_are_checked_at_start_and_reported_truthfully() -> None:
    for table, message in (
        (
            {"max_processes": 5},
            "max_processes must be a whole number, at least 16, or 0 for no bound (got 5)",
        ),
        ({"max_processes": "many"}, "(got 'many')"),
        ({"memory_mb": 8}, "memory_mb must be a whole number of MiB, at least 32, or 0"),
        ({"memory_mb": 1.5}, "(got 1.5)"),
        ({"memory_mb": True}, "memory_mb must be a whole number"),
        ({"max_processes": -1}, "max_processes must be a whole number"),
    ):
        with pytest.raises(Exception, match=None) as caught:
            SandboxSettings.from_table(table)
        assert message in str(caught.value), (table, str(caught.value))
    off = SandboxSettings.from_table({"max_processes": 0, "memory_mb": 0})
    assert off.bounds is None and "not bounded" in off.bounds_text()
    nothing = bounds.Support(
        dirs={}, reason="no cgroup v1 hierarchy with the pids, memory controller is mounted"
    )
    said = nothing.describe(bounds.Bounds(processes=30, memory_mb=64))
    assert said == f"processes and memory not bounded ({nothing.reason})", said
    half = bounds.Support(
        dirs={"pids": Path("/x")}, reason="the memory cgroup of this process is not writable"
    )
    said = half.describe(bounds.Bounds(processes=30, memory_mb=64))
    assert said.startswith("at most 30 processes; memory not bounded (the memory cgroup"), said
    assert json.dumps(said)
