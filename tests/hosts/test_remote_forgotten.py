"""A closed remote shell leaves nothing of it in the process that closed it: the host's mirror
bookkeeping, its process answers and the list of remote shells seen without a record drop it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sshd_harness import RemoteHosts

from tether.config import load_config
from tether.shells import Shells
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext

CTX = CallContext(actor="conv-forget")


def _tasks(shells: list[str], action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tasks": [{"target": {"sessions": s}, "action": action, **extra} for s in shells]}


async def test_a_closed_remote_shell_is_forgotten(tether_home: Path, remote: RemoteHosts) -> None:
    remote.add("box-a")
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    try:
        action = {"kind": "open", "count": 2, "host": "box-a"}
        opened = await registry.call("shell_open", {"tasks": [{"action": action}]}, CTX)
        shells = [t["shell"] for t in opened.structured["tasks"]]
        assert all(shells), opened.text
        ran = await registry.call(
            "shell_run", _tasks(shells, {"kind": "run", "command": "echo hi"}, wait={"kind": "exit"}), CTX
        )
        assert all(t["exitCode"] == 0 for t in ran.structured["tasks"]), ran.text
        await registry.call("shell_state", {}, CTX)  # a listing: both seen on the host
        engine = Shells.get(load_config(tether_home))
        assert set(shells) <= engine.held()
        closed = await registry.call("shell_manage", _tasks(shells[1:], {"kind": "close"}), CTX)
        assert all(t["ok"] for t in closed.structured["tasks"]), closed.text
        await registry.call("shell_state", {}, CTX)
        assert shells[1] not in engine.held() and shells[0] in engine.held()
    finally:
        await catalog.aclose()
