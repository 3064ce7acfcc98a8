"""Helpers for the safety tests: one task's outcome, the audit records, in-process store access."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp import Client
from shell_harness import call

from tether.config import load_config
from tether.store.db import Store
from tether.store.macros import MacroStore
from tether.store.manual_locks import ManualLocks
from tether.store.vault import Vault


async def task(
    client: Client, tool: str, shell: str, action: dict[str, Any], **blocks: Any
) -> tuple[str, dict[str, Any]]:
    """One task on ``shell``: (the call's text, the task's structured outcome)."""
    text, data = await call(
        client, tool, {"tasks": [{"target": {"sessions": shell}, "action": action, **blocks}]}
    )
    out: dict[str, Any] = data["tasks"][0]
    return text, out


def audit_records(home: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted((home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return records


def vault(home: Path) -> Vault:
    return Vault.open(load_config(home))


def manual_locks(home: Path) -> ManualLocks:
    return ManualLocks(Store.open(home))


def macros(home: Path) -> MacroStore:
    return MacroStore(Store.open(home))
