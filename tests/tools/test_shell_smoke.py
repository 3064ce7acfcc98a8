from __future__ import annotations

from pathlib import Path

from shell_harness import open_shell, run, shell_client


async def test_open_and_run(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="a")
        out = await run(client, shell, "echo hi; (exit 3)")
        assert out["exitCode"] == 3, out
        assert out["lines"] == ["hi"], out
