"""Output that asks the terminal something, or random bytes, never garbles the next run.

tmux answers queries itself (DA, DSR/CPR, XTVERSION, colour queries); the answer arrives as input.
An answer that reached readline as keys used to start a search (ESC P is M-P) and swallow the next
command, which then waited out its whole timeout; modes left on (the alternate screen, DEC graphics,
insert mode) garbled what the screen shows. Through the MCP client: each query, then a run and a
send that must work at once, and a screen that reads normally."""

from __future__ import annotations

from pathlib import Path

import pytest
from shell_harness import open_shell, read, run, send, shell_client

QUERIES = {
    "DA1": r"printf '\e[c'",
    "DA2": r"printf '\e[>c'",
    "DSR": r"printf '\e[5n'",
    "CPR": r"printf '\e[6n'",
    "DECRQSS": r"printf '\eP$q m\e\\'",
    "OSC 10": r"printf '\e]10;?\e\\'",
    "OSC 11": r"printf '\e]11;?\a'",
    "XTVERSION": r"printf '\e[>q'",
    "all at once": r"printf '\e[c\e[>q\e[6n\e]11;?\a\e[5n\eP$q m\e\\'",
    "modes left on": r"printf '\e[?1049h\e(0\e[4h\e[?1h\e=\e[?1000h\e[?25l'",
    "random bytes": "head -c 100000 /dev/urandom; head -c 200000 /dev/urandom | tr -d '\\n' | fold -w 4000",
}
_NEXT = {"kind": "exit", "timeoutMs": 15000}


@pytest.mark.timeout(300)
async def test_the_next_run_finds_its_shell(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="queries")
        for name, command in QUERIES.items():
            out = await run(client, shell, command, wait=_NEXT)
            assert out["ok"] and out["exitCode"] == 0, (name, out)
            out = await run(client, shell, "echo next-$((6*7))", wait=_NEXT)
            assert out["ok"] and out["exitCode"] == 0 and out["lines"] == ["next-42"], (name, out)
            # typed piece by piece, the line holds exactly what was sent (no answer digits before it)
            out = await send(client, shell, "echo sent-$((2*3))", ["Enter"])
            assert out["ok"] and "sent-6" in out["lines"], (name, out)
            assert not any("command not found" in line for line in out["lines"]), (name, out)
            screen = await read(client, shell, {"mode": "screen"})
            # DEC graphics would draw "next" as "┼e│├"; the alternate screen would hide it
            assert any("next-42" in line for line in screen["lines"]), (name, screen["lines"])
