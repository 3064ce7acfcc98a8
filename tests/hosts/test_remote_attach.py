"""A person's terminal on a remote shell: ``attach_argv`` (what the panel runs in a PTY) is ssh with
a terminal, through the shared connection, attaching tmux on the host; keys typed there reach the
shell, and what the shell prints reaches the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import signal
from pathlib import Path

import anyio
from sshd_harness import RemoteHosts

from hang import HANG_S
from tether.config import load_config
from tether.shells import Shells, open_shell
from tether.shells.logs import read_range


async def test_attach_argv_is_a_terminal_on_the_remote_shell(tether_home: Path, remote: RemoteHosts) -> None:
    remote.add("box-a")
    shells = Shells.get(load_config(tether_home))
    try:
        rec, reached = await open_shell(
            shells,
            owner="panel",
            label="seen",
            cwd=None,
            cols=80,
            rows=24,
            idle_minutes=None,
            host_name="box-a",
        )
        assert reached
        host = shells.hosts["box-a"]
        argv = host.attach_argv(rec.id)
        assert argv[0] == "ssh" and "-tt" in argv and f"ControlPath={tether_home / 'ssh' / 'box-a'}" in argv
        pid, fd = pty.fork()
        if pid == 0:
            os.environ["TERM"] = "xterm-256color"
            os.execvp(argv[0], argv)
        seen = bytearray()
        got = asyncio.Event()
        loop = asyncio.get_running_loop()

        def readable() -> None:
            with contextlib.suppress(OSError):
                seen.extend(os.read(fd, 65536))
            got.set()

        loop.add_reader(fd, readable)
        try:

            async def until(marker: bytes) -> None:
                with anyio.fail_after(HANG_S):
                    while marker not in seen:
                        got.clear()
                        await got.wait()

            await until(b"\x1b[")  # tmux drew the screen
            os.write(fd, b"echo VIA-$((6*7))-ATTACH\r")
            await until(b"VIA-42-ATTACH")  # the shell's output, on this terminal
            log = host.log_of(rec.id)
            with anyio.fail_after(HANG_S):  # and in the shell's log, as any output
                while b"VIA-42-ATTACH" not in read_range(log, 0):
                    await anyio.sleep(0.02)
            pane = await host.pane_now(rec.id)
            assert pane.attached == 1
        finally:
            loop.remove_reader(fd)
            os.kill(pid, signal.SIGTERM)
            await asyncio.to_thread(os.waitpid, pid, 0)
            os.close(fd)
        with anyio.fail_after(HANG_S):  # the person's client left: tmux counts no client any more
            while (await host.pane_now(rec.id)).attached:
                await anyio.sleep(0.02)
    finally:
        await shells.close()
