"""A value delivered to a shell stays masked for as long as the shell lives, whatever happens to
the vault item afterwards (rotated, removed, its group locked again) and whichever tether process
reads the shell (the one that delivered it, a restarted one, another one); a snapshot taken at
close is masked with it too. The database keeps such a value only sealed, and only until the shell
is closed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from safety_harness import task, vault
from shell_harness import call, open_shell, shell_client, text_of

from tether.config import load_config
from tether.shells import Shells, lifecycle
from tether.shells.idle import close_idle
from tether.shells.records import now_ms
from tether.store.db import Store
from tether.store.vault.crypto import create_master_key

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


def _break_key(home: Path, how: str) -> None:
    """Make ``vault.key`` unusable the way ``how`` says (after values were delivered)."""
    key = home / "vault.key"
    if how == "too-widely-readable":
        key.chmod(0o644)
    elif how == "unreadable":  # root reads any mode: a directory in its place cannot be read
        key.unlink()
        key.mkdir()
    elif how == "a-fifo":  # opened for reading, it waited for a writer for ever
        key.unlink()
        os.mkfifo(key)
    else:  # "replaced", "removed-then-replaced": another valid key, which opens nothing sealed
        if how == "removed-then-replaced":
            vault(home).remove("TOKEN_A")  # only the delivered row is left to know the value
        key.unlink()
        create_master_key(key)


async def _close_as(home: Path, client: Client, shell: str, path: str) -> None:
    """Close ``shell`` by ``path``: an idle sweep, a reap once its tmux session is gone, or a
    ``shell_manage close`` (whose answer fails closed with VAULT_KEY: the close itself is done)."""
    if path == "close":
        result = await client.call_tool(
            "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert OLD not in text_of(result) + json.dumps(result.structured_content or {})
        return
    engine = Shells.get(load_config(home))
    try:
        if path == "idle":
            assert await close_idle(engine, now_ms() + 2 * 60_000) == [shell]
        else:
            await engine.host_of(shell).kill(shell)
            later = now_ms() + lifecycle.REAP_MIN_IDLE_MS + 60_000
            lost = await lifecycle.lost_shells(engine, later)
            assert [s.record.id for s in lost] == [shell]
            lifecycle.reap(engine, lost, actor="test", now=later)
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("how", "path"),
    [
        ("too-widely-readable", "idle"),
        ("unreadable", "idle"),
        ("a-fifo", "idle"),
        ("replaced", "idle"),
        ("removed-then-replaced", "idle"),
        ("too-widely-readable", "reap"),
        ("removed-then-replaced", "reap"),
        ("too-widely-readable", "close"),
        ("removed-then-replaced", "close"),
    ],
)
async def test_a_snapshot_after_the_key_became_unusable_keeps_no_value_in_clear(
    tether_home: Path, how: str, path: str
) -> None:
    """With ``vault.key`` unusable after a value reached a shell, nothing can mask it: an idle
    close, a reap and a close still close the shell, and its snapshot keeps no scrollback (it says
    why) rather than the value in clear."""
    vault(tether_home).set("TOKEN_A", OLD)
    async with shell_client(tether_home, "conv-k") as client:
        shell = await open_shell(client, idleMinutes=1)
        await _run(client, shell, "echo {{vault.TOKEN_A}}")
        _break_key(tether_home, how)
        await _close_as(tether_home, client, shell, path)
    snapshots = sorted((tether_home / "snapshots" / shell).glob("*.txt"))
    assert len(snapshots) == 1
    text = snapshots[0].read_text(errors="replace")
    assert OLD not in text
    assert "the scrollback was not kept in this snapshot" in text and "vault.key" in text
    store = Store.open(tether_home)
    assert store.query("SELECT closed_ms FROM shells WHERE id = ?", (shell,))[0]["closed_ms"] is not None
    assert store.query("SELECT COUNT(*) AS n FROM vault_delivered")[0]["n"] == 0
    rows = store.query("SELECT label, cwd FROM snapshots WHERE shell_id = ?", (shell,))
    assert OLD not in json.dumps([dict(r) for r in rows])
