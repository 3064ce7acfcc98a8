"""``sync_log`` on each kind of host: the invisible mark printed on the pane's terminal reaches the
shell's log (through tmux's pipe here, through the mirror for a remote host), so the call proves the
log caught up — and returns ``True`` — instead of waiting out its deadline and saying it cannot tell."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from sshd_harness import RemoteHosts

from hang import HANG_S
from tether.config import load_config
from tether.shells import Shells, open_shell
from tether.shells.logs import read_range


@pytest.mark.parametrize("where", ["local", "box-a"])
async def test_the_mark_reaches_the_log(tether_home: Path, remote: RemoteHosts, where: str) -> None:
    if where != "local":
        remote.add(where)
    shells = Shells.get(load_config(tether_home))
    try:
        rec, reached = await open_shell(
            shells, owner="t", label="sync", cwd=None, cols=80, rows=24, idle_minutes=None, host_name=where
        )
        assert reached
        host = shells.hosts[where]
        pane = await host.pane_now(rec.id)
        before = read_range(host.log_of(rec.id), 0).count(b"\x1b]6973;sync;")
        with anyio.fail_after(HANG_S):
            assert await host.sync_log(pane) is True
        # The mark itself is what was found: one more of them in the log.
        assert read_range(host.log_of(rec.id), 0).count(b"\x1b]6973;sync;") == before + 1
    finally:
        await shells.close()
