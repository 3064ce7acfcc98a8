"""People-only tools: what the panel and the CLI act through, and what no MCP conversation can
list or call; the client names conversations give, carried to shell_state, timelines and audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from safety_harness import audit_records, manual_locks, vault
from shell_harness import call, open_shell, run, shell_client, text_of

from tether.errors import NotFoundError
from tether.store.conversations import Conversations
from tether.store.db import Store
from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

PEOPLE_TOOLS = {
    "shell_lock",
    "shell_records",
    "shell_timeline",
    "shell_output",
    "shell_record",
    "vault",
    "audit_verify",
    "audit_show",
    "audit_setup_keys",
    "approvals",
    "panel_people",
}
PANEL = CallContext(actor="panel", source="panel")
CANARY = "people-canary-93kq1"


async def test_mcp_never_lists_nor_runs_a_people_tool(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-agent") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names and not names & PEOPLE_TOOLS, names & PEOPLE_TOOLS
        shell = await open_shell(client)
        # An agent trying to unlock a shell a person locked, or to read the vault or audit log
        # through the people's doors, is told the tool does not exist — and nothing happens.
        manual_locks(tether_home).lock(shell, who="alice", why="mine", source="cli")
        for name, args in (
            ("shell_lock", {"shell": shell, "action": "unlock"}),
            ("vault", {"action": "list"}),
            ("audit_show", {}),
            ("shell_record", {"shell": shell}),
            ("approvals", {"action": "answer", "id": "apr-000000000000", "approve": True}),  # approve itself
        ):
            result = await client.call_tool(name, args)
            assert result.is_error and text_of(result).startswith("NOT_FOUND: unknown tool"), text_of(result)
            offered = set(text_of(result).split("available tools: ", 1)[1].split(", "))
            assert offered == names  # the tools it offers instead are exactly the listed ones
        assert manual_locks(tether_home).get(shell) is not None
        out = await run(client, shell, "echo still-locked")
        assert out["errorCode"] == "REFUSED" and "locked by alice" in out["error"]


async def test_the_registry_refuses_people_tools_to_any_other_source(catalog: ToolCatalog) -> None:
    registry = catalog.registry
    assert {t.name for t in registry.list(people=True)} == PEOPLE_TOOLS
    assert not {t.name for t in registry.list()} & PEOPLE_TOOLS
    assert registry.get("vault") is None and registry.get("vault", people=True) is not None
    for source in ("tool", "host"):
        with pytest.raises(NotFoundError, match="unknown tool 'vault'"):
            await registry.call("vault", {"action": "list"}, CallContext(actor="conv-x", source=source))
    for ctx in (PANEL, CallContext(actor="cli", source="cli")):
        listed = await registry.call("vault", {"action": "list"}, ctx)
        assert listed.structured == {"groups": [], "items": [], "unlockMinutes": 15, "maxUnlockMinutes": 480}


async def test_lock_vault_and_audit_through_the_tools_audited_once(
    tether_home: Path, catalog: ToolCatalog
) -> None:
    v = vault(tether_home)
    v.create_group("ops", "pass phrase one")
    v.set("KEY", CANARY, group="ops", passphrase="pass phrase one")
    async with shell_client(tether_home, "conv-agent") as client:
        shell = await open_shell(client)
    registry = catalog.registry
    locked = await registry.call("shell_lock", {"shell": shell, "action": "lock", "reason": "deploy"}, PANEL)
    assert locked.structured["lock"]["who"] == "panel" and locked.structured["changed"] is True
    unknown = registry.call("shell_lock", {"shell": "dsh-zzzzzz", "action": "lock"}, PANEL)
    with pytest.raises(NotFoundError, match="no shell dsh-zzzzzz is recorded"):
        await unknown
    unlocked = await registry.call(
        "vault", {"action": "unlock", "group": "ops", "passphrase": "pass phrase one", "minutes": 2}, PANEL
    )
    assert unlocked.structured["group"]["locked"] is False and CANARY not in json.dumps(unlocked.structured)
    verified = await registry.call("audit_verify", {}, PANEL)
    shown = await registry.call("audit_show", {"shell": shell, "days": 1}, PANEL)
    assert verified.structured["ok"] is True
    assert [r["action"] for r in shown.structured["records"] if r["source"] == "panel"] == ["lock"]
    records = [(r["tool"], r["action"], r["targets"], r["outcome"]) for r in audit_records(tether_home)]
    panel = [r for r in records if r[0] in PEOPLE_TOOLS]
    # One record per action; reading and verifying the log are not actions.
    assert panel == [
        ("shell_lock", "lock", [shell], "ok"),
        ("shell_lock", "lock", ["dsh-zzzzzz"], "error"),
        ("vault", "unlock", ["ops"], "ok"),
    ]
    for path in (tether_home / "audit").iterdir():
        text = path.read_text()
        assert CANARY not in text and "pass phrase one" not in text


async def test_the_client_name_reaches_state_timeline_and_audit(
    tether_home: Path, catalog: ToolCatalog
) -> None:
    info = types.Implementation(name="test-agent", version="9.9")
    async with shell_client(tether_home, "conv-named", client_info=info) as client:
        shell = await open_shell(client, label="named")
        assert (await run(client, shell, "false"))["exitCode"] == 1
        _, state = await call(client, "shell_state", {"scope": "*"})
    row = next(r for r in state["shells"] if r["shell"] == shell)
    assert (row["openedBy"], row["client"], row["manualLock"]) == ("conv-named", "test-agent 9.9", None)
    timeline = await catalog.registry.call("shell_timeline", {"shell": shell}, PANEL)
    commands: list[dict[str, Any]] = timeline.structured["commands"]
    assert [(c["text"], c["by"], c["client"], c["exitCode"]) for c in commands] == [
        ("false", "conv-named", "test-agent 9.9", 1)
    ]
    assert commands[0]["durationMs"] >= 0 and commands[0]["authorKind"] == "conversation"
    runs = [r for r in audit_records(tether_home) if r["tool"] == "shell_run"]
    assert runs and all(r["extra"]["client"] == "test-agent 9.9" for r in runs)


async def test_a_listing_reads_the_client_names_of_its_own_shells_alone(
    tether_home: Path, catalog: ToolCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversations table keeps a row for every conversation the home ever had (each
    ``tether mcp`` started is one, for months). Before, every shell_state, shell_records, timeline
    and audit_show read it whole for the client names of a few shells."""
    store = Store.open(tether_home)
    try:
        conversations = Conversations(store)
        with store.transaction():
            for i in range(300):
                conversations.note(f"conv-old{i}", "old-client")
            conversations.note("conv-named", "test-agent 9.9")
    finally:
        store.close()
    ctx = CallContext(actor="conv-named")
    registry = catalog.registry
    opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, ctx)
    shell = opened.structured["tasks"][0]["shell"]
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": "false"},
        "wait": {"kind": "exit"},
    }
    assert (await registry.call("shell_run", {"tasks": [task]}, ctx)).structured["tasks"][0]["exitCode"] == 1
    read: list[int] = []
    real_query = Store.query

    def query(self: Store, sql: str, params: Any = ()) -> list[Any]:
        rows = real_query(self, sql, params)
        if "FROM conversations" in sql:
            read.append(len(rows))
        return rows

    monkeypatch.setattr(Store, "query", query)
    state = await registry.call("shell_state", {"scope": "*"}, ctx)
    assert [r["client"] for r in state.structured["shells"] if r["shell"] == shell] == ["test-agent 9.9"]
    records = await registry.call("shell_records", {}, PANEL)
    assert [r["client"] for r in records.structured["shells"] if r["id"] == shell] == ["test-agent 9.9"]
    timeline = await registry.call("shell_timeline", {"shell": shell}, PANEL)
    assert [c["client"] for c in timeline.structured["commands"]] == ["test-agent 9.9"]
    shown = await registry.call("audit_show", {"actor": "conv-named"}, PANEL)
    assert shown.structured["records"], shown.text
    assert read and max(read) <= 1, read  # the named conversation's row, not all 301


async def test_a_closed_shell_cannot_be_locked_and_a_left_lock_can_be_lifted(
    tether_home: Path, catalog: ToolCatalog
) -> None:
    async with shell_client(tether_home, "conv-agent") as client:
        shell = await open_shell(client)
        await call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
    registry = catalog.registry
    with pytest.raises(NotFoundError, match=f"shell {shell} is closed: it takes no commands"):
        await registry.call("shell_lock", {"shell": shell, "action": "lock"}, PANEL)
    assert manual_locks(tether_home).get(shell) is None
    # A lock taken while it was open stays liftable.
    manual_locks(tether_home).lock(shell, who="alice", why="left over", source="cli")
    lifted = await registry.call("shell_lock", {"shell": shell, "action": "unlock"}, PANEL)
    assert lifted.structured["changed"] is True and manual_locks(tether_home).get(shell) is None
