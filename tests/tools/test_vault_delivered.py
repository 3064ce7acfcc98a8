"""A value delivered to a shell stays masked for as long as the shell lives, whatever happens to
the vault item afterwards (rotated, removed, its group locked again) and whichever tether process
reads the shell (the one that delivered it, a restarted one, another one); a snapshot taken at
close is masked with it too. The database keeps such a value only sealed, and only until the shell
is closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp import Client
from safety_harness import task, vault
from shell_harness import call, open_shell, shell_client, text_of

from tether.store.db import Store

OLD = "old-canary-Q7w9Zx31"
NEW = "new-canary-Hk28Lm55"
GROUPED = "grouped-canary-Vb46Tn02"


async def _returned(client: Client, tool: str, shell: str, action: dict[str, Any]) -> str:
    result = await client.call_tool(tool, {"tasks": [{"target": {"sessions": shell}, "action": action}]})
    return text_of(result) + json.dumps(result.structured_content or {}, ensure_ascii=False)


async def _every_read(client: Client, shell: str) -> str:
    seen = [
        await _returned(client, "shell_read", shell, {"kind": "read", "mode": mode})
        for mode in ("tail", "screen", "history")
    ]
    seen.append(await _returned(client, "shell_read", shell, {"kind": "read", "search": "canary"}))
    return "\n".join(seen)


async def _run(client: Client, shell: str, command: str) -> str:
    action = {"kind": "run", "command": command}
    text, out = await task(client, "shell_run", shell, action, wait={"kind": "exit"})
    assert out["exitCode"] == 0, out
    return text + json.dumps(out, ensure_ascii=False)


async def _close(client: Client, shell: str) -> None:
    closing = {"target": {"sessions": shell}, "action": {"kind": "close"}}
    await call(client, "shell_manage", {"tasks": [closing]})


def _snapshot_texts(home: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((home / "snapshots").rglob("*.txt")))


async def test_a_value_rotated_while_its_shell_runs_stays_masked(tether_home: Path) -> None:
    """Same process: delivering the new value must not forget the old one the shell printed."""
    v = vault(tether_home)
    v.set("TOKEN_A", OLD)
    async with shell_client(tether_home, "conv-r") as client:
        shell = await open_shell(client)
        assert OLD not in await _run(client, shell, "echo {{vault.TOKEN_A}}")
        v.set("TOKEN_A", NEW)
        assert NEW not in await _run(client, shell, "echo {{vault.TOKEN_A}}")
        seen = await _every_read(client, shell)
        assert OLD not in seen and NEW not in seen
        assert "[vault:TOKEN_A]" in seen
        await _close(client, shell)
    snapshots = _snapshot_texts(tether_home)
    assert "[vault:TOKEN_A]" in snapshots
    assert OLD not in snapshots and NEW not in snapshots


async def test_another_process_masks_what_was_delivered_before_the_item_changed(tether_home: Path) -> None:
    """A restarted ``tether mcp`` (same conversation, same shell) did not deliver the values itself:
    it still masks one whose item was removed and one whose passphrase group locked again, and the
    snapshot it takes at close is masked with them; then they are no longer kept."""
    v = vault(tether_home)
    v.set("TOKEN_A", OLD)
    v.create_group("prod", "pass phrase")
    v.set("TOKEN_P", GROUPED, group="prod", passphrase="pass phrase")
    v.unlock("prod", "pass phrase")
    async with shell_client(tether_home, "conv-x") as client:
        shell = await open_shell(client)
        await _run(client, shell, "echo {{vault.TOKEN_A}} {{vault.TOKEN_P}}")
    v.remove("TOKEN_A")
    v.lock("prod")
    database = (tether_home / "tether.db").read_bytes() + (tether_home / "tether.db-wal").read_bytes()
    assert OLD.encode() not in database and GROUPED.encode() not in database
    async with shell_client(tether_home, "conv-x") as client:
        seen = await _every_read(client, shell)
        assert OLD not in seen and GROUPED not in seen
        assert "[vault:TOKEN_A]" in seen and "[vault:TOKEN_P]" in seen
        await _close(client, shell)
    snapshots = _snapshot_texts(tether_home)
    assert OLD not in snapshots and GROUPED not in snapshots
    assert "[vault:TOKEN_A]" in snapshots
    assert Store.open(tether_home).query("SELECT COUNT(*) AS n FROM vault_delivered")[0]["n"] == 0
