"""A program that prints the shell's own log cannot end a run, forge its exit status or fake a
command in the timeline.

The log holds the shell's nonce in every event, so ``cat`` (or ``tail``, ``grep``, ``less``) of
``$TETHER_HOME/logs/$TETHER_SHELL.log`` prints prompt, start and end events the nonce alone cannot
tell from the shell's. A run that waited for its exit ended at the first replayed prompt, with
that old prompt's status (0 for a command that exits 3) and without what it printed after. The
shell numbers its events, and an event not above the last one read is dropped."""

from __future__ import annotations

from pathlib import Path

import anyio
from shell_harness import call, open_shell, run, shell_client

from hang import HANG_MS

_LOG = '"$TETHER_HOME/logs/$TETHER_SHELL.log"'


async def test_a_replayed_log_neither_ends_the_run_nor_sets_its_status(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="replay")
        for word in ("one", "two"):
            assert (await run(client, shell, f"echo {word}"))["exitCode"] == 0
        # The fifo holds the command after the replay until the test has seen the run go on.
        fifo = tether_home / "gate"
        assert (await run(client, shell, f"mkfifo {fifo}"))["exitCode"] == 0
        # A copy, replayed whole: ``cat`` of the live log reads its own replay as tmux appends it
        # and stops where the log ends at that instant, at times inside an escape sequence, which
        # then took the next byte printed (``EPLAYED-2``: the match below never came).
        replay = tether_home / "replay.log"
        assert (await run(client, shell, f"cp {_LOG} {replay}"))["exitCode"] == 0
        command = f"cat {replay}; echo REPLAYED-$((1+1)); read -r x < {fifo}; echo after-$x; (exit 3)"
        out = await run(
            client, shell, command, wait={"kind": "match", "pattern": "REPLAYED-2", "timeoutMs": HANG_MS}
        )
        assert out["met"] and out["exitCode"] is None, out
        await anyio.to_thread.run_sync(fifo.write_text, "go\n")  # opened once the command reads it
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read", "mode": "since"},
                        "wait": {"kind": "exit", "runId": out["runId"], "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        task = data["tasks"][0]
        # Before the fix: met at once with exit=0, the replayed prompt of `echo two`
        assert task["met"] is True and task["exitCode"] == 3, task
        assert "after-go" in task["lines"], task
        # The next run is the shell's, at its prompt, and ends at its own end
        out = await run(client, shell, "echo next")
        assert out["exitCode"] == 0 and out["lines"] == ["next"], out
