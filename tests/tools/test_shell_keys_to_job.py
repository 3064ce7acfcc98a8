"""Keys sent while a job is on its way to the terminal reach the job, not the shell.

bash forks a command; the child puts itself in a process group of its own and only then takes the
terminal. A ``C-c`` typed in between makes the line discipline signal the terminal's foreground
group, which is still the shell's: the job never sees it and runs on (on a busy machine the gap
lasts tens of milliseconds, long enough for an agent's ``shell_run`` with ``wait: none`` followed
at once by ``shell_send`` ``C-c``). Here a job holds that gap open for a second (``hands_back_job``).
"""

from __future__ import annotations

from pathlib import Path

from shell_harness import open_shell, read, run, send, shell_client

from hang import HANG_MS
from proc_probe import hands_back_job


async def test_c_c_waits_for_the_job_to_take_the_terminal(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(client, shell, hands_back_job(1), wait={"kind": "match", "pattern": "handed back"})
        assert out["met"] is True, out
        await send(client, shell, "", ["C-c"])
        # Delivered to the shell, the interrupt is lost and the job sleeps its 1000 s: the wait
        # times out. Delivered to the job, python dies of SIGINT at once.
        ended = await read(client, shell, wait={"kind": "exit", "runId": out["runId"], "timeoutMs": HANG_MS})
        assert ended["exitCode"] == 130, ended
