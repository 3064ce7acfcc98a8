"""Retention: a shell closed more than ``[sessions] keep_closed_days`` ago loses its log, timing
samples, snapshots and rows at the next sweep; nothing else is touched.

Before it, a closed shell's files and rows were kept for ever (about 30 MiB a day at a shell a
minute, measured by bench/soak.py). Shells are made "old" by writing their close time in the db
and sweeping with a clock of the test's (``sweep_once(now=...)``), as the idle sweep's tests do.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from hang import HANG_S
from proc_probe import mcp_children
from tether.config import load_config
from tether.errors import NotFoundError, UsageError
from tether.shells import Shells
from tether.shells.idle import sweep_once
from tether.shells.ids import new_run_id, new_shell_id
from tether.shells.records import Records, ShellRecord, now_ms
from tether.store.db import Store
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext

CTX = CallContext(actor="conv-retain")
PANEL = CallContext(actor="panel", source="panel")
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def _tasks(shells: list[str], action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tasks": [{"target": {"sessions": s}, "action": action, **extra} for s in shells]}


def _rows(home: Path, shell_id: str) -> dict[str, int]:
    conn = sqlite3.connect(home / "tether.db")
    try:
        return {
            table: conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {col} = ?", (shell_id,)).fetchone()[0]
            for table, col in (("shells", "id"), ("shell_runs", "shell_id"), ("snapshots", "shell_id"))
        }
    finally:
        conn.close()


def _set_closed(home: Path, shell_id: str, closed_ms: int) -> None:
    conn = sqlite3.connect(home / "tether.db")
    try:
        with conn:
            assert (
                conn.execute("UPDATE shells SET closed_ms = ? WHERE id = ?", (closed_ms, shell_id)).rowcount
                == 1
            )
    finally:
        conn.close()


def _files(home: Path, shell_id: str) -> list[Path]:
    return [home / "logs" / f"{shell_id}.log", home / "logs" / "times" / f"{shell_id}.times"]


async def _open_run(registry: Any, count: int) -> list[str]:
    opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open", "count": count}}]}, CTX)
    shells = [t["shell"] for t in opened.structured["tasks"]]
    ran = await registry.call(
        "shell_run",
        _tasks(shells, {"kind": "run", "command": "echo kept-output"}, wait={"kind": "exit"}),
        CTX,
    )
    assert all(t["exitCode"] == 0 for t in ran.structured["tasks"]), ran.text
    return shells


async def _close(registry: Any, shells: list[str]) -> None:
    closed = await registry.call("shell_manage", _tasks(shells, {"kind": "close"}), CTX)
    assert all(t["ok"] for t in closed.structured["tasks"]), closed.text


async def test_a_shell_closed_past_the_setting_loses_its_files_and_rows(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    try:
        old, recent, live, zombie = await _open_run(registry, 4)
        await _close(registry, [old, recent])
        for shell in (old, recent, live):
            assert (tether_home / "logs" / f"{shell}.log").stat().st_size > 0
        assert _rows(tether_home, old) == {"shells": 1, "shell_runs": 1, "snapshots": 1}
        assert (tether_home / "snapshots" / old).is_dir()
        engine = Shells.get(load_config(tether_home))
        for shell in (old, recent):  # a person pressed Enter at the panel (the timeline's typist)
            engine.records.note_enter(shell, "panel:alice", 0)
        now = now_ms()
        _set_closed(tether_home, old, now - 31 * DAY_MS)
        _set_closed(tether_home, recent, now - 29 * DAY_MS)
        # A record marked closed long ago whose tmux pane is still there (a close that failed after
        # its claim): kept while the pane exists.
        _set_closed(tether_home, zombie, now - 365 * DAY_MS)
        await sweep_once(engine, set(), now=now)

        assert _rows(tether_home, old) == {"shells": 0, "shell_runs": 0, "snapshots": 0}
        assert (engine.records.enters(old), engine.records.enters(recent)) == ([], [(0, "panel:alice")])
        assert not any(f.exists() for f in _files(tether_home, old))
        assert not (tether_home / "snapshots" / old).exists()
        for kept in (recent, zombie):
            assert _rows(tether_home, kept)["shells"] == 1 and _rows(tether_home, kept)["shell_runs"] == 1
            assert (tether_home / "logs" / f"{kept}.log").exists()
        assert (tether_home / "snapshots" / recent).is_dir()
        assert _rows(tether_home, live) == {"shells": 1, "shell_runs": 1, "snapshots": 0}
        assert set(await engine.live()) >= {live, zombie}
        read = await registry.call(
            "shell_run", _tasks([live], {"kind": "run", "command": "echo still"}, wait={"kind": "exit"}), CTX
        )
        assert read.structured["tasks"][0]["exitCode"] == 0, read.text
        # The audit log is not retention's: the old shell's calls are still in it.
        audit = "".join(p.read_text() for p in (tether_home / "audit").rglob("*") if p.is_file())
        assert old in audit

        # What names the removed shell is told clearly, with the setting's name.
        revived = await registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open", "from": old}}]}, CTX
        )
        task = revived.structured["tasks"][0]
        assert not task["ok"] and task["errorCode"] == "NOT_FOUND", revived.text
        assert "removed by retention" in task["error"] and "[sessions] keep_closed_days (30)" in task["error"]
        for tool in ("shell_timeline", "shell_record"):  # the panel's timeline and recording
            with pytest.raises(NotFoundError) as info:
                await registry.call(tool, {"shell": old}, PANEL)
            assert "removed by retention" in info.value.message, tool
        read_old = await registry.call("shell_read", _tasks([old], {"kind": "read"}), CTX)
        assert "removed by retention" in read_old.structured["tasks"][0]["error"], read_old.text

        # At most one sweep an hour per home (any process): the recent shell, now expired, is
        # kept by a sweep a minute later and removed by one an hour later.
        _set_closed(tether_home, recent, now - 40 * DAY_MS)
        await sweep_once(engine, set(), now=now + 60_000)
        assert _rows(tether_home, recent)["shells"] == 1
        await sweep_once(engine, set(), now=now + HOUR_MS + 60_000)
        assert _rows(tether_home, recent) == {"shells": 0, "shell_runs": 0, "snapshots": 0}
        assert not (tether_home / "logs" / f"{recent}.log").exists()
        assert _rows(tether_home, zombie)["shells"] == 1  # its pane is still there
    finally:
        await catalog.aclose()


async def test_zero_keeps_closed_shells_for_ever(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text("[sessions]\nkeep_closed_days = 0\n", encoding="utf-8")
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry = catalog.registry
    try:
        old, _live = await _open_run(registry, 2)
        await _close(registry, [old])
        now = now_ms()
        _set_closed(tether_home, old, now - 3650 * DAY_MS)
        engine = Shells.get(load_config(tether_home))
        await sweep_once(engine, set(), now=now)
        await sweep_once(engine, set(), now=now + 2 * HOUR_MS)
        assert _rows(tether_home, old) == {"shells": 1, "shell_runs": 1, "snapshots": 1}
        assert (tether_home / "logs" / f"{old}.log").exists()
        revived = await registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open", "from": old}}]}, CTX
        )
        assert revived.structured["tasks"][0]["ok"], revived.text
    finally:
        await catalog.aclose()


@pytest.mark.parametrize("value", ["-1", "1.5", '"30"'])
def test_a_bad_keep_closed_days_is_refused_at_start(tmp_path: Path, value: str) -> None:
    (tmp_path / "config.toml").write_text(f"[sessions]\nkeep_closed_days = {value}\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert info.value.message == "config.toml: [sessions].keep_closed_days must be a non-negative integer"


def _expired_record(home: Path, closed_ms: int) -> str:
    """A shell closed at ``closed_ms`` as a close leaves it (record, run, snapshot, log, timing
    samples), written straight to the home: no tmux needed."""
    shell_id = new_shell_id()
    store = Store.open(home)
    try:
        records = Records(store)
        records.add_shell(
            ShellRecord(
                id=shell_id,
                owner="conv-old",
                label="",
                created_ms=closed_ms - 60_000,
                cwd="/",
                last_activity_ms=closed_ms,
                idle_minutes=None,
            )
        )
        store.execute(
            "INSERT INTO shell_runs (run_id, shell_id, nonce, command, actor, started_ms, log_offset) "
            "VALUES (?, ?, '', 'true', 'conv-old', ?, 0)",
            (new_run_id(), shell_id, closed_ms - 1000),
        )
        store.execute(
            "INSERT INTO snapshots (shell_id, label, cwd, cols, rows, taken_ms, reason, actor, file, size, "
            "dropped_bytes) VALUES (?, '', '/', 80, 24, ?, 'close', 'conv-old', ?, 3, 0)",
            (shell_id, closed_ms, f"{shell_id}/close.txt"),
        )
        assert records.mark_closed(shell_id, closed_ms)
    finally:
        store.close()
    for path in _files(home, shell_id):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"old\n")
    (home / "snapshots" / shell_id).mkdir(parents=True)
    (home / "snapshots" / shell_id / "close.txt").write_text("old")
    return shell_id


def _gone(home: Path, shell_id: str) -> bool:
    return (
        _rows(home, shell_id) == {"shells": 0, "shell_runs": 0, "snapshots": 0}
        and not any(f.exists() for f in _files(home, shell_id))
        and not (home / "snapshots" / shell_id).exists()
    )


async def test_retention_runs_with_no_shell_open_and_starts_no_tmux(tether_home: Path) -> None:
    """Before, the sweep returned at once when no shell was open: a home whose servers no longer
    opened shells kept its expired ones for ever. It must still start no tmux server there."""
    now = now_ms()
    old = _expired_record(tether_home, now - 31 * DAY_MS)
    engine = Shells.get(load_config(tether_home))
    try:
        await sweep_once(engine, set(), now=now)
        assert _gone(tether_home, old)
        assert not (tether_home / "tmux.sock").exists()  # no tmux server was started for it

        # A tmux server runs (a shell of this home is there) but no record is open: a record
        # marked closed whose session still exists is kept; the plain client started nothing new.
        catalog = build_catalog(load_config(tether_home), with_jobs=False)
        try:
            (zombie,) = await _open_run(catalog.registry, 1)
        finally:
            await catalog.aclose()
        _set_closed(tether_home, zombie, now - 365 * DAY_MS)
        older = _expired_record(tether_home, now - 40 * DAY_MS)
        engine = Shells.get(load_config(tether_home))
        assert not engine.records.shells()
        await sweep_once(engine, set(), now=now + HOUR_MS + 60_000)
        assert _gone(tether_home, older)
        assert _rows(tether_home, zombie)["shells"] == 1
        assert zombie in (await engine.local.sessions_running() or set())
    finally:
        await Shells.close_home(tether_home)


async def test_retention_lets_calls_run_between_the_shells_it_removes(tether_home: Path) -> None:
    """A first sweep over a home with a backlog removes up to 500 shells: 1.4 s for 300 at load
    10 (bench/bighome.py), all of it on the event loop before. It now gives the loop its turn
    after each shell, so a call waits for one shell's removal, not the whole sweep's."""
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        await _open_run(catalog.registry, 1)  # an open shell: the old code swept too
        now = now_ms()
        old = [_expired_record(tether_home, now - (31 + i) * DAY_MS) for i in range(3)]
        engine = Shells.get(load_config(tether_home))
        sweeping = asyncio.ensure_future(sweep_once(engine, set(), now=now))
        left_seen: set[int] = set()
        with anyio.fail_after(HANG_S):
            while not sweeping.done():
                left_seen.add(sum(_rows(tether_home, s)["shells"] for s in old))
                await asyncio.sleep(0)
        await sweeping
        assert all(_gone(tether_home, s) for s in old)
        assert {2, 1} <= left_seen, left_seen  # this task ran between the removals
    finally:
        await catalog.aclose()


@pytest.mark.parametrize("door", ["tether mcp", "tether shell list"])
async def test_a_server_sweeps_at_its_start_with_no_shell_open(tether_home: Path, door: str) -> None:
    """``tether mcp`` (no call after ``initialize``) and the command line's tools process remove
    an expired shell soon after they start, and start no tmux server for it."""
    old = _expired_record(tether_home, now_ms() - 31 * DAY_MS)
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    tether = str(Path(sys.executable).parent / "tether")
    if door == "tether mcp":
        async with Client(StdioServerParameters(command=tether, args=["mcp"], env=env)):
            with anyio.fail_after(HANG_S):
                while not _gone(tether_home, old):
                    await anyio.sleep(0.05)
    else:
        listed = await anyio.run_process([tether, "shell", "list"], env=env, check=False)
        assert listed.returncode == 0, listed.stderr.decode()
        with anyio.fail_after(HANG_S):
            while not _gone(tether_home, old):  # the tools process lives on for its next command
                await anyio.sleep(0.05)
    assert not (tether_home / "tmux.sock").exists()


async def test_a_server_that_uses_no_shell_becomes_no_tmux_client(tether_home: Path) -> None:
    """Its retention starts nothing even while the home's tmux server runs with shells in it: no
    control client of its own (each would get tmux's notifications and list every pane at each
    sweep), the expired shell removed all the same and the live one kept."""
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        (live,) = await _open_run(catalog.registry, 1)
    finally:
        await catalog.aclose()
    old = _expired_record(tether_home, now_ms() - 31 * DAY_MS)
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    before = {p.pid for p in psutil.Process().children()}
    tether = str(Path(sys.executable).parent / "tether")
    async with Client(StdioServerParameters(command=tether, args=["mcp"], env=env)):
        (server,) = mcp_children(besides=before)
        with anyio.fail_after(HANG_S):
            while not _gone(tether_home, old):
                await anyio.sleep(0.05)
        assert not [p for p in server.children(recursive=True) if p.name().startswith("tmux")]
    assert _rows(tether_home, live)["shells"] == 1
