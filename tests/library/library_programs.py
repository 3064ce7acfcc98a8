"""Helpers the library tests share: a shell opened and a command run, through the public face only."""

from __future__ import annotations

import tether


async def open_shell(t: tether.Tether) -> str:
    result = await t.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
    assert not result.is_error, result.text
    shell: str = result.structured["tasks"][0]["shell"]
    return shell


async def run_in_shell(t: tether.Tether, shell: str, command: str) -> list[str]:
    """The output lines of ``command`` run in ``shell``, once it has exited."""
    result = await t.call(
        "shell_run",
        {
            "tasks": [
                {
                    "target": {"sessions": shell},
                    "action": {"kind": "run", "command": command},
                    "wait": {"kind": "exit"},
                }
            ]
        },
    )
    assert not result.is_error, result.text
    lines: list[str] = result.structured["tasks"][0]["lines"]
    return lines
