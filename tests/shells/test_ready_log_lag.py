"""A run waits for the prompt behind a program its shell's prompt hooks run, also when the end of
the line before is still on its way to the log (tmux pipes the pane to a ``cat`` that appends it)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import psutil
import pytest

from hang import HANG_S
from tether.shells import Shells, Write, open_shell, run
from tether.shells.requests import Safety, WaitKind
from writes import until, write

pytestmark = pytest.mark.timeout(300)


def _log_writer(log: Path) -> psutil.Process:
    """The ``cat`` that appends the pane's output to ``log`` (a child of the pipe-pane ``sh``)."""
    for proc in psutil.process_iter(["cmdline"]):
        if str(log) in (proc.info["cmdline"] or []):
            [cat] = [c for c in proc.children() if c.name() == "cat"]
            return cat
    raise AssertionError(f"no process appends to {log}")


async def test_a_hook_in_front_before_the_lines_end_reached_the_log_is_waited_for(
    home_shells: Shells, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The line ends and its prompt hook (`sleep 1`) takes the terminal while the log's `cat` is
    # stopped: the log shows the line running (its start, not its end) and `sleep` is in front.
    # The next run refused, "sleep runs in front", as it would for a command of the line; it must
    # wait for the prompt. Proving the log caught up (a mark printed on the terminal and read back
    # in the log) resumes the `cat` here, as time does in real life.
    shell, _ = await open_shell(
        home_shells, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
    )

    def bypassing(kind: WaitKind) -> Write:
        return write(
            shell.id, until(kind), Safety(bypass_guard=True, reason="the test stops the log's writer")
        )

    host = home_shells.host_of(shell.id)
    cat = _log_writer(host.log_of(shell.id))
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    assert (await run(home_shells, bypassing("exit"), "PROMPT_COMMAND='sleep 1'")).exit_code == 0
    await run(home_shells, bypassing("none"), f"read -r _ < {gate} && kill -STOP {cat.pid}")
    with anyio.fail_after(HANG_S):  # the line has started (its start is in the log)
        while (activity := home_shells.activity(shell.id)) is None or activity.phase != "running":
            await anyio.sleep(0.02)
    with open(gate, "w") as opened:  # noqa: ASYNC230 - a FIFO's reader is there: it opens at once
        opened.write("go\n")
    with anyio.fail_after(HANG_S):  # the line ended unseen: its hook's sleep is in front
        while not (
            cat.status() == psutil.STATUS_STOPPED
            and (await host.foreground(await host.pane(shell.id))).command == "sleep"
        ):
            await anyio.sleep(0.02)
    assert home_shells.activity(shell.id).phase == "running"  # type: ignore[union-attr]

    real_sync = host.sync_log

    async def resumed_then_synced(*args: object, **kwargs: float) -> bool:
        os.kill(cat.pid, signal.SIGCONT)
        return await real_sync(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(host, "sync_log", resumed_then_synced)
    try:
        out = await run(home_shells, bypassing("exit"), "echo after")
    finally:
        os.kill(cat.pid, signal.SIGCONT)
    assert out.exit_code == 0 and "after" in out.lines, out
