"""A tmux that stops answering (its server stopped, a remote host's network gone silent) must not
hold a call for ever: the control client is ended after ``ANSWER_S`` without a reply, the waiting
commands fail saying so, and the next command, once tmux answers again, starts a new client."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from tether.shells.tmux import control as control_module
from tether.shells.tmux.control import ControlClient, SessionError


async def test_a_stopped_server_fails_the_command_in_time_and_the_next_one_works(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_module, "ANSWER_S", 1.0)
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    server = int((await client.run("display-message", "-p", "#{pid}"))[0])
    os.kill(server, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(SessionError, match="did not answer within 1 s"):
            await asyncio.wait_for(
                asyncio.gather(
                    client.run("display-message", "-p", "x"),
                    client.run_many([("list-panes", "-a"), ("display-message", "-p", "y")]),
                ),
                30,
            )
        assert time.monotonic() - started < 10
    finally:
        os.kill(server, signal.SIGCONT)
    try:
        assert await asyncio.wait_for(client.run("display-message", "-p", "back"), 30) == ["back"]
        assert int((await client.run("display-message", "-p", "#{pid}"))[0]) == server
    finally:
        await client.close()


async def test_a_slow_stream_of_answers_is_not_a_wedged_client(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog looks for no answer at all: commands that keep being answered, however many
    wait in all, never end the client."""
    monkeypatch.setattr(control_module, "ANSWER_S", 0.3)
    client = ControlClient(tether_home / "tmux.sock", gate=tether_home / "tmux.gate")
    try:
        for n in range(20):
            out = await client.run("display-message", "-p", f"n{n}")
            assert out == [f"n{n}"]
            await asyncio.sleep(0.05)
    finally:
        await client.close()
