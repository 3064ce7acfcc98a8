"""A server that opens and closes shells for weeks holds only the open ones.

Each shell a process has touched left entries in seven tables (its nonce, host, confinement,
phase scanner, the agents busy on it, the log's retained start, the output clock's last sample)
that nothing removed: about one kilobyte a shell, for the life of the process. A close now drops
them, and the idle sweep drops those of shells another process closed. The home itself kept a
write-lock file for every shell it ever had; a close removes it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from tether.config import load_config
from tether.shells import Shells
from tether.shells.idle import sweep_once
from tether.store.vault import Vault
from tether.tools.audited import AuditMiddleware
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext

CTX = CallContext(actor="conv-forget")

_CLOSE_ELSEWHERE = """
import asyncio, sys
from tether.config import load_config
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext

async def main() -> None:
    catalog = build_catalog(load_config(), with_jobs=False)
    try:
        task = {"target": {"sessions": sys.argv[1]}, "action": {"kind": "close"}}
        result = await catalog.registry.call("shell_manage", {"tasks": [task]}, CallContext(actor="other"))
        assert result.structured["tasks"][0]["ok"], result.text
    finally:
        await catalog.aclose()

asyncio.run(main())
"""


def _tasks(shells: list[str], action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tasks": [{"target": {"sessions": s}, "action": action, **extra} for s in shells]}


async def test_closing_shells_leaves_nothing_of_them_in_the_process(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    try:
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open", "count": 4}}]}, CTX)
        shells = [t["shell"] for t in opened.structured["tasks"]]
        ran = await registry.call(
            "shell_run", _tasks(shells, {"kind": "run", "command": "echo hi"}, wait={"kind": "exit"}), CTX
        )
        assert all(t["exitCode"] == 0 for t in ran.structured["tasks"]), ran.text
        await registry.call("shell_read", _tasks(shells, {"kind": "read"}), CTX)
        engine = Shells.get(load_config(tether_home))
        assert engine.held() >= set(shells)  # what the calls above made it hold
        locks = {s: tether_home / "locks" / f"{s}.lock" for s in shells}
        assert all(lock.exists() for lock in locks.values())  # each run held its shell's lock
        closed = await registry.call("shell_manage", _tasks(shells[1:], {"kind": "close"}), CTX)
        assert all(t["ok"] for t in closed.structured["tasks"]), closed.text
        # Only the open shell is held; no call is on any shell now.
        assert engine.held() == {shells[0]}
        assert engine.ai_busy == {}
        # Nor does the home keep a lock file for each shell it ever had.
        assert [s for s, lock in locks.items() if lock.exists()] == shells[:1]
        # It still works as before: nothing it needs was dropped with the others.
        again = await registry.call(
            "shell_run",
            _tasks(shells[:1], {"kind": "run", "command": "echo again"}, wait={"kind": "exit"}),
            CTX,
        )
        assert again.structured["tasks"][0]["exitCode"] == 0, again.text
    finally:
        await catalog.aclose()


async def test_a_shell_another_process_closed_is_forgotten_at_the_next_sweep(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    try:
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open", "count": 2}}]}, CTX)
        kept, other = (t["shell"] for t in opened.structured["tasks"])
        await registry.call(
            "shell_run",
            _tasks([kept, other], {"kind": "run", "command": "echo hi"}, wait={"kind": "exit"}),
            CTX,
        )
        engine = Shells.get(load_config(tether_home))
        assert {kept, other} <= engine.held()
        argv = [sys.executable, "-c", _CLOSE_ELSEWHERE, other]
        closer = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=120)
        assert closer.returncode == 0, closer.stderr
        assert other in engine.held()  # nothing here has looked since
        await sweep_once(engine, set())
        assert other not in engine.held() and kept in engine.held()
    finally:
        await catalog.aclose()


async def test_a_vault_value_given_to_many_shells_is_kept_once(tether_home: Path) -> None:
    """Each shell handed `{{vault.NAME}}` left a per-shell entry in the process's masker, kept after
    the close and walked at every masked call: a server that gives one token to a shell a minute
    held a thousand entries a day for one value. It keeps one per value, still masked after the
    shells are gone."""
    Vault.open(load_config(tether_home)).set("SOAK_TOKEN", "soak-canary-Pq73Wz")
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    (redactor,) = {m.redactor for m in registry.middleware if isinstance(m, AuditMiddleware)}
    try:
        for _ in range(3):
            opened = await registry.call(
                "shell_open", {"tasks": [{"action": {"kind": "open", "count": 2}}]}, CTX
            )
            shells = [t["shell"] for t in opened.structured["tasks"]]
            ran = await registry.call(
                "shell_run",
                _tasks(
                    shells, {"kind": "run", "command": "echo {{vault.SOAK_TOKEN}}"}, wait={"kind": "exit"}
                ),
                CTX,
            )
            assert all(t["exitCode"] == 0 for t in ran.structured["tasks"]), ran.text
            await registry.call("shell_manage", _tasks(shells, {"kind": "close"}), CTX)
        assert redactor.held() == 1  # six shells, one value
        # Still masked after every shell it went to is closed (and the vault no longer has it).
        Vault.open(load_config(tether_home)).remove("SOAK_TOKEN")
        echoed = await registry.call(
            "bash", {"command": "echo soak-canary-Pq73Wz", "description": "the value, typed"}, CTX
        )
        assert "soak-canary-Pq73Wz" not in echoed.text, echoed.text
    finally:
        await catalog.aclose()
