"""A manual lock refuses agents only: the person who locked a shell still acts on it (panel, CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safety_harness import manual_locks, task
from shell_harness import open_shell, shell_client

from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

PANEL = CallContext(actor="panel", source="panel")
CLI = CallContext(actor="cli", source="cli")


async def one(catalog: ToolCatalog, tool: str, ctx: CallContext, **the_task: Any) -> dict[str, Any]:
    result = await catalog.registry.call(tool, {"tasks": [the_task]}, ctx)
    out: dict[str, Any] = result.structured["tasks"][0]
    return out


async def test_the_person_who_locked_a_shell_manages_it_and_an_agent_is_refused(
    tether_home: Path, catalog: ToolCatalog
) -> None:
    async with shell_client(tether_home) as agent:
        shell = await open_shell(agent, label="work")
        manual_locks(tether_home).lock(shell, who="alice", why="demo", source="panel")

        _, refused = await task(agent, "shell_manage", shell, {"kind": "rename", "newName": "agent-name"})
        assert not refused["ok"] and "locked by alice" in refused["error"]
        _, refused = await task(agent, "shell_run", shell, {"kind": "run", "command": "echo agent"})
        assert not refused["ok"] and "locked by alice" in refused["error"]

        target = {"sessions": shell}
        renamed = await one(
            catalog, "shell_manage", PANEL, target=target, action={"kind": "rename", "newName": "mine"}
        )
        assert renamed["ok"], renamed
        assert renamed["data"]["label"] == "mine"
        snap = await one(catalog, "shell_manage", CLI, target=target, action={"kind": "snapshot"})
        assert snap["ok"] and snap["data"]["snapshot"]["reason"] == "manual", snap
        ran = await one(
            catalog,
            "shell_run",
            PANEL,
            target=target,
            action={"kind": "run", "command": "echo person-$((40+2))"},
            wait={"kind": "exit"},
        )
        assert ran["ok"] and "person-42" in ran["lines"], ran
        closed = await one(catalog, "shell_manage", PANEL, target=target, action={"kind": "close"})
        assert closed["ok"] and closed["data"]["closed"] == [shell], closed
