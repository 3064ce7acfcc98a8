"""``RemoteShell`` (the one ``sh`` per host that answers small questions) on a local ``sh`` as its
channel: answers in order, and when the channel ends, every question still open fails with
``CONNECTION_LOST`` — those nobody waits for any more (the start-up swallow, one that timed out)
quietly, without asyncio's "exception was never retrieved" in the server's log."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from typing import Any

import anyio
import pytest

from hang import HANG_S
from tether.errors import TetherError
from tether.shells.hosts.ssh.sh import RemoteShell


async def test_a_channel_that_ends_fails_every_open_question_quietly() -> None:
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    procs: list[asyncio.subprocess.Process] = []
    ended = asyncio.Event()

    async def spawn() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        procs.append(proc)
        return proc

    sh = RemoteShell(where="host test", spawn=spawn, ended=ended.set)
    try:
        with anyio.fail_after(HANG_S):
            reply = await sh.run("echo one; exit 3")
            assert (reply.status, reply.out) == (3, "one\n")
            # A question the channel never answers: the caller gives up; the channel then ends.
            # (Its sleep leaves the channel's output alone, as a command on a host does: the pipe
            # here ends with the channel.)
            with pytest.raises(TetherError) as raised:
                await sh.run("sleep 600 >/dev/null", timeout=0.2)
            assert raised.value.code == "CONNECTION_LOST"
            # The next question starts a fresh channel (the swallow is asked again), which ends
            # under it.
            asking = asyncio.ensure_future(sh.run("sleep 600 >/dev/null"))
            while len(procs) < 2:
                await asyncio.sleep(0.01)
            procs[-1].kill()
            with pytest.raises(TetherError) as raised:
                await asking
            assert raised.value.code == "CONNECTION_LOST"
            await ended.wait()
        gc.collect()
        await asyncio.sleep(0)
        assert [c.get("message") for c in unhandled] == []
    finally:
        await sh.close()
        loop.set_exception_handler(None)
        for proc in procs:  # the sleeps the killed channels left
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


async def test_a_question_behind_a_long_one_is_not_failed_for_its_wait() -> None:
    # The shell answers one question at a time. A sweep waits out its grace there; a question
    # asked behind it (another close's look at its shell) counts its deadline from the sweep's.
    # Before, its own 15 s ran from its asking: behind a sweep longer than that it failed, and
    # ended the channel — and the sweep under way on it, whose processes then ran on.
    async def spawn() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )

    sh = RemoteShell(where="host test", spawn=spawn, ended=lambda: None)
    try:
        with anyio.fail_after(HANG_S):
            long = asyncio.ensure_future(sh.run("sleep 0.5; echo long", timeout=HANG_S))
            short = asyncio.ensure_future(sh.run("echo short", timeout=0.05))
            assert ((await long).out, (await short).out) == ("long\n", "short\n")
    finally:
        await sh.close()


async def test_a_question_behind_one_nobody_waits_for_fails_at_that_ones_deadline() -> None:
    # The question the shell is on was given up by its asker (a wait's deadline cancels it): its
    # deadline still ends the wedged channel, and the question behind it with it, rather than
    # that one waiting its own whole time after it.
    async def spawn() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )

    sh = RemoteShell(where="host test", spawn=spawn, ended=lambda: None)
    try:
        with anyio.fail_after(HANG_S / 2):
            await sh.run(":")
            stuck = asyncio.ensure_future(sh.run("sleep 600 >/dev/null", timeout=0.2))
            behind = asyncio.ensure_future(sh.run("echo behind", timeout=HANG_S))
            await asyncio.sleep(0)  # both asked
            stuck.cancel()
            with pytest.raises(TetherError) as raised:
                await behind
            assert raised.value.code == "CONNECTION_LOST"
    finally:
        await sh.close()
