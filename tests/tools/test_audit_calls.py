"""The middleware's audit record: a call that ends alone syncs it on the loop's own thread; one
that ends while another call is open hands it to the commit thread, and the loop serves the other
call meanwhile. Both are on disk before the call returns."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import tether.audit.log as audit_log
from tether.audit import query, verify
from tether.shells import SecretRedactor
from tether.tools.audited import AuditMiddleware
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

pytestmark = pytest.mark.timeout(60)

SCHEMA: dict[str, Any] = {"type": "object"}


class _Syncs:
    """``os.fsync`` in the audit module, recording the thread of each day-file sync."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        self._real(fd)  # durable first: a thread is recorded only for a sync that happened
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            self.threads.append(threading.get_ident())


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Syncs]:
    wrapper = _Syncs()
    monkeypatch.setattr(audit_log.os, "fsync", wrapper)
    yield wrapper


def _registry(home: Path, gate: asyncio.Event) -> ToolRegistry:
    async def quick(_args: Mapping[str, Any], _ctx: CallContext) -> ToolResult:
        return ToolResult(text="done")

    async def slow(_args: Mapping[str, Any], _ctx: CallContext) -> ToolResult:
        await gate.wait()
        return ToolResult(text="done late")

    registry = ToolRegistry()
    registry.add(ToolDef(name="quick", description="quick", input_schema=SCHEMA, handler=quick))
    registry.add(ToolDef(name="slow", description="slow", input_schema=SCHEMA, handler=slow))
    registry.middleware.append(AuditMiddleware(home, SecretRedactor(lambda: None)))
    return registry


async def test_a_lone_call_syncs_its_record_before_it_returns_on_its_thread(
    tmp_path: Path, syncs: _Syncs
) -> None:
    registry = _registry(tmp_path, asyncio.Event())
    ctx = CallContext(actor="conv-a")
    for _ in range(3):
        await registry.call("quick", {}, ctx)
    assert syncs.threads == [threading.get_ident()] * 3
    assert [r.tool for r in query(tmp_path, days=1, limit=10)] == ["quick"] * 3
    assert verify(tmp_path).ok


async def test_a_call_ending_beside_another_hands_its_record_to_the_thread(
    tmp_path: Path, syncs: _Syncs
) -> None:
    gate = asyncio.Event()
    registry = _registry(tmp_path, gate)
    ctx = CallContext(actor="conv-a")
    await registry.call("quick", {}, ctx)  # the day file exists: later syncs are the records' own
    syncs.threads.clear()
    slow = asyncio.ensure_future(registry.call("slow", {}, ctx))
    await asyncio.sleep(0)  # the slow call is open
    await registry.call("quick", {}, ctx)
    assert len(syncs.threads) == 1 and syncs.threads[0] != threading.get_ident()  # on disk, elsewhere
    gate.set()
    await slow  # ends alone now
    assert syncs.threads[1:] == [threading.get_ident()]
    assert [r.tool for r in query(tmp_path, days=1, limit=10)] == ["quick", "quick", "slow"]
    assert verify(tmp_path).ok
