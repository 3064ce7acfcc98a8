"""A shell is closed once, whoever closes it: two closes at once (two conversations, the panel,
the idle sweep of another process) both answered "closed", each took a close snapshot and each was
audited, so one close was counted twice. The close is now claimed in the store first (one
``UPDATE … WHERE closed_ms IS NULL``): the loser is ``NOT_FOUND`` saying another call closed it,
and nothing of it is recorded."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from tether.config import load_config
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext


async def test_two_closes_at_once_close_once_and_the_other_says_so(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        call = catalog.registry.call
        opened = await call(
            "shell_open",
            {"tasks": [{"action": {"kind": "open"}}]},
            CallContext(actor="conv-a"),
        )
        shell = opened.structured["tasks"][0]["shell"]
        close = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        results = await asyncio.gather(
            call("shell_manage", close, CallContext(actor="conv-a")),
            call("shell_manage", close, CallContext(actor="panel")),
        )
        tasks = [r.structured["tasks"][0] for r in results]
        assert sorted(t["ok"] for t in tasks) == [False, True], tasks
        (lost,) = [t for t in tasks if not t["ok"]]
        assert lost["errorCode"] == "NOT_FOUND", lost
        assert f"shell {shell} was closed meanwhile by another call" in lost["error"]
    finally:
        await catalog.aclose()
    conn = sqlite3.connect(tether_home / "tether.db")
    snapshots = conn.execute(
        "SELECT count(*) FROM snapshots WHERE shell_id = ? AND reason = 'close'", (shell,)
    )
    assert snapshots.fetchone()[0] == 1
    assert conn.execute("SELECT closed_ms IS NOT NULL FROM shells WHERE id = ?", (shell,)).fetchone()[0] == 1
    conn.close()
