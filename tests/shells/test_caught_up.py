"""A wait proves its shell's log caught up before it answers, but a log that no longer follows its
pane does not hold a condition that already holds: the proof gives up after 2 s, not at the wait's
deadline, and the condition is answered as it looks."""

from __future__ import annotations

from pathlib import Path

from hang import HANG_MS
from tether.config import load_config
from tether.shells import Shells, open_shell
from tether.shells.logs import log_size
from tether.shells.tmux import commands
from tether.shells.waits import WaitSpec


async def test_a_log_that_stopped_following_its_pane_does_not_hold_a_met_wait(
    tether_home: Path, tmp_path: Path
) -> None:
    engine = Shells.get(load_config(tether_home))
    try:
        shell, _ = await open_shell(
            engine, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
        )
        host, pane = await engine.pane(shell.id)
        # The log switched off: nothing the pane prints reaches it now, the sync mark included.
        await host.control.run(*commands.stop_pipe(pane.pane_id))
        made = tmp_path / "made"
        made.touch()
        spec = WaitSpec(kind="file", path=str(made), timeout_ms=HANG_MS)
        out = await engine.waits(host).wait(pane, spec, log_size(host.log_of(shell.id)))
        assert out.met is True and not out.timed_out, out
        # Answered once the proof gave up (2 s), not when the wait's own deadline came.
        assert out.elapsed_ms < HANG_MS, out
    finally:
        await engine.close()
