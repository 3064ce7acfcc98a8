"""A wait reads its shell's log to the end at each wake, in as many chunks as that takes; what is
written after the read wakes it again (inotify), so it sleeps owing no read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.shells import Shells, open_shell, run, waits
from writes import until, write

pytestmark = pytest.mark.timeout(300)


async def test_a_wait_reads_past_its_chunk_without_another_wake(
    home_shells: Shells, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A read takes at most 64 bytes: the run's ~60 KB and its end event are in the log long before
    # the last writes wake the wait, and no write comes after the prompt. A wait that slept after
    # one chunk would find the run's end only by its once-a-second liveness check, chunk by chunk.
    monkeypatch.setattr(waits, "_SCAN_CHUNK", 64)
    shell, _ = await open_shell(
        home_shells, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
    )
    out = await run(home_shells, write(shell.id, until("exit")), "seq 1 12000")
    assert out.met is True and out.exit_code == 0, out
    assert out.lines[-1] == "12000", out.lines[-3:]
