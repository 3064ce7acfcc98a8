"""A wait on a remote host answers with everything printed before its condition held.

A remote shell's log reaches this machine through a mirror the link feeds behind the terminal,
while some conditions are asked of the host itself: whether what is in front still works (text
typed to a program, ``idle``), a file, a process. When the host says yes, what the shell printed
just before may not be in the mirror yet; a wait that trusted the mirror as it was came back
without it (seen in CI on a busy machine: python's ``done`` missing). Here the link is slowed on
purpose — every read of the log stream is held ``_LAG_S`` before it is written to the mirror — so
the gap is wide every time.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from sshd_harness import RemoteHosts

from hang import HANG_MS
from tether.config import load_config
from tether.shells import Shells, open_shell, run
from tether.shells.hosts.ssh import SshHost
from tether.shells.requests import Wait
from writes import until, write

_LAG_S = 0.4  # well over the settle's 150 ms: the answer arrives after the host says "idle"


class _SlowLink:
    """A stream's reader whose data is handed on ``_LAG_S`` after it arrived."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self, n: int = -1) -> bytes:
        data = await self._reader.read(n)
        if data:
            await asyncio.sleep(_LAG_S)
        return data


async def _slowed_shell(shells: Shells, monkeypatch: pytest.MonkeyPatch) -> str:
    """A shell on box-a whose mirror is fed ``_LAG_S`` behind the host's log."""
    host = shells.hosts["box-a"]
    assert isinstance(host, SshHost)
    spawn = host.mirror._spawn

    async def slow_spawn(shell_id: str, start: int) -> asyncio.subprocess.Process:
        proc = await spawn(shell_id, start)
        assert proc.stdout is not None
        proc.stdout = _SlowLink(proc.stdout)  # type: ignore[assignment]
        return proc

    monkeypatch.setattr(host.mirror, "_spawn", slow_spawn)
    rec, reached = await open_shell(
        shells, owner="t", label="lag", cwd=None, cols=80, rows=24, idle_minutes=None, host_name="box-a"
    )
    assert reached
    return rec.id


async def test_a_programs_answer_that_is_late_in_the_mirror_is_waited_for(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote.add("box-a")
    shells = Shells.get(load_config(tether_home))
    try:
        shell = await _slowed_shell(shells, monkeypatch)
        repl = Wait(kind="match", pattern=">>> ", regex=re.compile(">>> "), timeout_ms=HANG_MS)
        assert (await run(shells, write(shell, repl), "python3 -q")).met is True

        # python computes (busy: not idle), prints, and reads again; its `done` reaches the mirror
        # _LAG_S later, after the host already says nothing in front works.
        line = "x = sum(range(3 * 10**7)); print('do' + 'ne')"
        out = await run(shells, write(shell, until("idle")), line)
        assert out.met is True and "done" in out.lines, out

        # Proving the mirror caught up is not itself output: were the mark output, each proof
        # would unsettle the screen again and quiet input would never be idle (a timeout here).
        out = await run(shells, write(shell, Wait(kind="idle", timeout_ms=20_000)), "y = 1")
        assert out.met is True, out
        out = await run(shells, write(shell, Wait(kind="idle", timeout_ms=20_000)), "print(y + 1)")
        assert out.met is True and "2" in out.lines, out
    finally:
        await shells.close()


async def test_a_condition_asked_of_the_host_shows_what_was_printed_before_it_held(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    remote.add("box-a")
    shells = Shells.get(load_config(tether_home))
    try:
        shell = await _slowed_shell(shells, monkeypatch)
        # The run's start reaches the mirror in one slowed read, the echo (1 s later, more than
        # _LAG_S) in a later one; the file exists on the host as soon as the echo ran, so a poll
        # finds it while the echo is still on its way.
        made = tmp_path / "made"
        wait = Wait(kind="file", path=str(made), poll_ms=20, timeout_ms=HANG_MS)
        line = f"sleep 1; echo before-the-file; touch {made}; sleep 1"
        out = await run(shells, write(shell, wait), line)
        assert out.met is True and "before-the-file" in out.lines, out
    finally:
        await shells.close()
