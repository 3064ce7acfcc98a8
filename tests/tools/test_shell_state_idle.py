"""``shell_state`` tells a shell sitting at its prompt (``idle``) from one running a command (``busy``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

AGENT = CallContext(actor="conv-state")


async def one(catalog: ToolCatalog, tool: str, **the_task: Any) -> dict[str, Any]:
    result = await catalog.registry.call(tool, {"tasks": [the_task]}, AGENT)
    out: dict[str, Any] = result.structured["tasks"][0]
    assert out["ok"], out
    return out


async def states(catalog: ToolCatalog, shell: str) -> list[str]:
    result = await catalog.registry.call("shell_state", {"sessions": shell}, AGENT)
    rows = result.structured["shells"]
    assert [r["shell"] for r in rows] == [shell], rows
    found: list[str] = rows[0]["states"]
    return found


async def test_a_shell_at_its_prompt_is_idle_on_every_read_and_a_running_command_is_busy(
    catalog: ToolCatalog, tmp_path: Path
) -> None:
    shell = (await one(catalog, "shell_open", action={"kind": "open", "cwd": str(tmp_path)}))["shell"]
    target = {"sessions": shell}
    ran = await one(
        catalog,
        "shell_run",
        target=target,
        action={"kind": "run", "command": "echo done"},
        wait={"kind": "exit"},
    )
    assert ran["exitCode"] == 0
    reads = [await states(catalog, shell) for _ in range(20)]
    assert all("idle" in s and "busy" not in s for s in reads), reads

    await one(
        catalog,
        "shell_run",
        target=target,
        action={"kind": "run", "command": "sleep 1000"},
        wait={"kind": "none"},
    )
    running = [await states(catalog, shell) for _ in range(5)]
    assert all("busy" in s and "idle" not in s for s in running), running
    await one(catalog, "shell_send", target=target, action={"kind": "send", "text": "", "keys": ["C-c"]})
