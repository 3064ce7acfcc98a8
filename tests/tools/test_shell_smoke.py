from __future__ import annotations

from pathlib import Path

from shell_harness import call, open_shell, run, shell_client


async def test_open_and_run(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="a")
        out = await run(client, shell, "echo hi; (exit 3)")
        assert out["exitCode"] == 3, out
        assert out["lines"] == ["hi"], out


async def test_shells_do_not_inherit_the_servers_credentials(tether_home: Path) -> None:
    secrets = {"MY_API_KEY": "k-123", "DB_URL": "postgres://u:pw@host/db", "HARMLESS": "visible"}
    async with shell_client(tether_home, extra_env=secrets) as client:
        shell = await open_shell(client)
        out = await run(client, shell, 'echo "${MY_API_KEY-unset} ${DB_URL-unset} ${HARMLESS-unset}"')
        assert out["lines"] == ["unset unset visible"]


async def test_the_log_holds_the_shells_first_byte(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        reads = []
        for mode in ("history", "screen"):
            _, data = await call(
                client,
                "shell_read",
                {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", "mode": mode}}]},
            )
            reads.append(data["tasks"][0]["lines"])
        history, screen = reads
        assert screen and history == screen  # the first prompt is in the log, not only on the screen
