"""The scripts a remote host runs to find and end a shell's processes, run here by ``sh`` on this
machine's ``/proc``: what is below the shell's processes is found, marker or not, but for tether's
own and what is below it; a process found earlier is taken for the same one only while its start
time matches (a pid handed to another process meanwhile is never signalled); a sweep that ended
everything logs nothing."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until
from tether.shells.hosts.ssh.sh import RemoteShell
from tether.shells.hosts.ssh.sweep import Marked, Sweeper, collect_script, parse_known, sweep_script


def _sh(script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def _start(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :].split()[19].decode()


def test_what_is_below_a_shells_processes_is_found_but_for_tethers_own() -> None:
    mine, cleared, own, below_own = (unique_sleep_arg() for _ in range(4))
    shell_id = "sweep-" + mine.replace(".", "")
    script = (
        f"env -i /usr/bin/sleep {cleared} & "
        f"env -i TETHER_DAEMON=test /bin/sh -c '/usr/bin/sleep {below_own} & wait' & "
        f"env -i TETHER_DAEMON=test /usr/bin/sleep {own} & /usr/bin/sleep {mine} & wait"
    )
    parent = subprocess.Popen(["sh", "-c", script], env={**os.environ, "TETHER_SHELL": shell_id})
    tokens = [mine, cleared, own, below_own]
    try:
        assert wait_until(lambda: all(alive_with(token) for token in tokens))
        found = parse_known(_sh(collect_script(shell_id, None)))
        pids = {int(word.split(":")[0]) for word in found}
        assert pids == {parent.pid, *alive_with(mine), *alive_with(cleared)}, found
        # By its pid alone (a live pane's bash), the same.
        by_root = parse_known(_sh(collect_script("sweep-none", parent.pid)))
        assert {int(word.split(":")[0]) for word in by_root} == pids, by_root
    finally:
        parent.kill()
        parent.wait()
        kill_all([pid for token in tokens for pid in alive_with(token)])


def test_a_process_found_earlier_is_ended_only_while_its_start_time_matches() -> None:
    token = unique_sleep_arg()
    proc = subprocess.Popen(["sleep", token])
    try:
        start = _start(proc.pid)
        stale = Marked("sweep-none", (f"{proc.pid}:{int(start) + 1}",), everywhere=False)
        assert _sh(sweep_script([stale], 0.2)).strip() == "ended=0 left=0"
        assert proc.poll() is None
        same = Marked("sweep-none", (f"{proc.pid}:{start}",), everywhere=False)
        assert _sh(sweep_script([same], 0.2)).strip() == "ended=1 left=0"
        assert wait_until(lambda: proc.poll() is not None)
    finally:
        proc.kill()
        proc.wait()


async def test_a_sweep_that_ended_everything_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def spawn() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )

    env = {**os.environ, "TETHER_SHELL": "sweep-log"}
    proc = await asyncio.create_subprocess_exec("sleep", unique_sleep_arg(), env=env)
    sh = RemoteShell(where="host test", spawn=spawn, ended=lambda: None)
    tasks: list[asyncio.Task[None]] = []
    sweeper = Sweeper(name="test", sh=sh, grace_s=1.0, spawn=tasks.append)
    try:
        with caplog.at_level(logging.WARNING), anyio.fail_after(HANG_S):
            await sweeper.sweep("sweep-log")
            assert await proc.wait() is not None
        assert [r.getMessage() for r in caplog.records if r.name.endswith("sweep")] == []
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await sh.close()


def test_a_sweeps_grace_is_the_hosts_time_however_slow_its_scans(tmp_path: Path) -> None:
    # On a loaded host a scan (a grep over every /proc/PID/stat and an awk) takes longer than the
    # pause between scans. The grace before SIGKILL was counted in pauses, so a 3 s grace lasted
    # 15 s and more there: past the deadline of the question queued behind the sweep, which then
    # ended the channel and the sweep with it. Here every scan takes longer than the whole grace:
    # the SIGKILL comes after the first look that follows the SIGTERM.
    token = unique_sleep_arg()
    shell_id = "sweep-" + token.replace(".", "")
    calls = tmp_path / "calls"
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "awk").write_text(f'#!/bin/sh\necho x >> {calls}\nsleep 0.3\nexec {shutil.which("awk")} "$@"\n')
    (slow / "awk").chmod(0o755)
    env = {**os.environ, "TETHER_SHELL": shell_id}
    proc = subprocess.Popen(["sh", "-c", f"trap '' TERM; exec sleep {token}"], env=env)
    try:
        assert wait_until(lambda: bool(alive_with(token)))
        script = sweep_script([Marked(shell_id)], 0.2)
        out = subprocess.run(
            ["sh", "-c", script],
            env={**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.strip() == "ended=1 left=0"
        assert proc.wait() == -9
        # The first look, the one after the SIGTERM's pause, the one after the SIGKILL (seven
        # before: the pauses 10, 20, 40, 80 and 100 ms had to add up to the grace first).
        assert len(calls.read_text().split()) == 3
    finally:
        proc.kill()
        proc.wait()
