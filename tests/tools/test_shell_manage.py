"""shell_manage over MCP: per-shell kinds, close/revive, reap, doctor, bad inputs."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from mcp import Client
from shell_harness import call, open_shell, run, shell_client

from tether.store.db import Store
from tether.store.manual_locks import ManualLocks
from tmux_probe import shell_sessions


async def manage(client: Client, *tasks: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return await call(client, "shell_manage", {"tasks": list(tasks)})


def one(data: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = data["tasks"][0]
    return task


def tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def audit_records(home: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted((home / "audit").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def db(home: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(home / "tether.db")
    conn.row_factory = sqlite3.Row
    return conn


async def test_per_shell_kinds_and_their_snapshots(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as c:
        shell = await open_shell(c, label="one", cwd=str(tmp_path), cols=90, rows=30)
        await run(c, shell, "echo scroll-one")
        text, data = await manage(
            c, {"target": {"sessions": shell}, "action": {"kind": "rename", "newName": "two"}}
        )
        task = one(data)
        assert task["ok"] and task["kind"] == "rename"
        assert task["data"]["label"] == "two" and task["data"]["previousLabel"] == "one"
        assert task["data"]["snapshot"]["reason"] == "rename"
        assert "renamed one → two" in text
        _, state = await call(c, "shell_state", {"sessions": shell})
        assert state["shells"][0]["label"] == "two"

        _, data = await manage(c, {"target": {"sessions": shell}, "action": {"kind": "resize", "cols": 100}})
        resized = one(data)["data"]
        assert (resized["cols"], resized["rows"]) == (100, 30)  # rows kept
        assert resized["snapshot"]["reason"] == "resize" and resized["snapshot"]["cols"] == 100
        size = tmux(tether_home, "display", "-p", "-t", f"={shell}:", "#{window_width}")
        assert size == "100"

        _, data = await manage(
            c, {"target": {"sessions": shell}, "action": {"kind": "idle", "idleMinutes": 7}}
        )
        assert one(data)["data"] == {"idleMinutes": 7}
        assert (
            db(tether_home).execute("SELECT idle_minutes FROM shells WHERE id = ?", (shell,)).fetchone()[0]
            == 7
        )

        _, data = await manage(c, {"target": {"sessions": shell}, "action": {"kind": "snapshot"}})
        snap = one(data)["data"]["snapshot"]
        assert snap["reason"] == "manual" and snap["cwd"] == str(tmp_path) and snap["bytes"] > 0

        _, data = await manage(c, {"action": {"kind": "snapshot-list"}})
        reasons = [s["reason"] for s in one(data)["data"]["snapshots"]]
        assert reasons == ["manual", "resize", "rename"]  # newest first

        await run(c, shell, "export KEEP=x; cd /")
        _, data = await manage(c, {"target": {"sessions": shell}, "action": {"kind": "respawn"}})
        respawned = one(data)
        assert respawned["ok"] and respawned["shell"] == shell
        out = await run(c, shell, "echo v=${KEEP:-gone}")
        assert out["exitCode"] == 0 and "v=gone" in out["lines"]  # a new process, same id, still logged


async def test_close_dryrun_close_and_revive_from_snapshot(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as c:
        shell = await open_shell(c, label="build", cwd=str(tmp_path), cols=110, rows=28)
        await run(c, shell, "echo precious-scrollback-line")
        text, data = await manage(
            c, {"target": {"sessions": shell}, "action": {"kind": "close"}, "safety": {"dryrun": True}}
        )
        assert one(data)["data"]["wouldClose"] == [shell] and "nothing was done" in text
        assert shell in shell_sessions(tether_home)
        assert db(tether_home).execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] == 0
        logged = audit_records(tether_home)[-1]
        assert (
            logged["tool"] == "shell_manage"
            and logged["outcome"] == "dry-run"
            and "dryrun" in logged["flags"]
        )

        _, data = await manage(c, {"target": {"sessions": shell}, "action": {"kind": "close"}})
        closed = one(data)["data"]
        assert closed["closed"] == [shell] and closed["snapshot"]["reason"] == "close"
        assert shell not in shell_sessions(tether_home)
        closed_ms = (
            db(tether_home).execute("SELECT closed_ms FROM shells WHERE id = ?", (shell,)).fetchone()[0]
        )
        assert closed_ms is not None

        text, data = await call(c, "shell_open", {"tasks": [{"action": {"kind": "open", "from": shell}}]})
        new = one(data)["shell"]
        assert new != shell and f"revived from {shell}" in text
        _, state = await call(c, "shell_state", {"sessions": new})
        row = state["shells"][0]
        assert row["label"] == "build" and row["cwd"] == str(tmp_path)
        _, hist = await call(
            c,
            "shell_read",
            {"tasks": [{"target": {"sessions": new}, "action": {"kind": "read", "mode": "history"}}]},
        )
        lines = one(hist)["lines"]
        begin = next(i for i, line in enumerate(lines) if f"revived scrollback of {shell}" in line)
        end = next(i for i, line in enumerate(lines) if "end of revived scrollback" in line)
        assert any("precious-scrollback-line" in line for line in lines[begin:end])
        _, found = await call(
            c,
            "shell_read",
            {
                "tasks": [
                    {"target": {"sessions": new}, "action": {"kind": "read", "search": "precious-scroll"}}
                ]
            },
        )
        assert one(found)["lines"][0].startswith("2 matches")  # the typed command and its output
        size = tmux(tether_home, "display", "-p", "-t", f"={new}:", "#{window_width}x#{window_height}")
        assert size == "110x28"
        out = await run(c, new, "echo fresh")
        assert out["exitCode"] == 0 and out["lines"] == ["fresh"]

        text, data = await call(
            c, "shell_open", {"tasks": [{"action": {"kind": "open", "from": "dsh-zzzzzz"}}]}
        )
        assert "no snapshot of dsh-zzzzzz exists" in one(data)["error"]


async def test_reap_takes_only_lost_shells_idle_ten_minutes(tether_home: Path) -> None:
    async with shell_client(tether_home) as c:
        old_lost = await open_shell(c, label="old")
        new_lost = await open_shell(c, label="new")
        alive = await open_shell(c, label="alive")
        for shell in (old_lost, new_lost):
            tmux(tether_home, "kill-session", "-t", f"={shell}")
        conn = db(tether_home)
        with conn:
            # Eleven minutes without input for one lost shell and the live one; nine for the other.
            conn.execute(
                "UPDATE shells SET last_activity_ms = last_activity_ms - 660000 WHERE id IN (?, ?)",
                (old_lost, alive),
            )
            conn.execute(
                "UPDATE shells SET last_activity_ms = last_activity_ms - 540000 WHERE id = ?", (new_lost,)
            )

        text, data = await manage(c, {"action": {"kind": "reap"}, "safety": {"dryrun": True}})
        assert [s["shell"] for s in one(data)["data"]["wouldReap"]] == [old_lost]
        assert "nothing was done" in text
        assert conn.execute("SELECT closed_ms FROM shells WHERE id = ?", (old_lost,)).fetchone()[0] is None

        _, data = await manage(c, {"action": {"kind": "reap"}})
        assert [s["shell"] for s in one(data)["data"]["reaped"]] == [old_lost]
        closed = {r[0] for r in conn.execute("SELECT id FROM shells WHERE closed_ms IS NOT NULL")}
        assert closed == {old_lost}
        assert alive in shell_sessions(tether_home)
        reason = conn.execute("SELECT reason FROM snapshots WHERE shell_id = ?", (old_lost,)).fetchone()[0]
        assert reason == "close"

        _, data = await manage(c, {"action": {"kind": "reap"}})
        assert one(data)["data"]["reaped"] == []


async def test_doctor_reports_each_check_and_a_broken_audit_byte(tether_home: Path) -> None:
    async with shell_client(tether_home) as c:
        text, data = await manage(c, {"action": {"kind": "doctor", "note": "pre-flight check"}})
        report = one(data)["data"]
        names = [ch["name"] for ch in report["checks"]]
        assert names == [
            "tmux server",
            "control-mode client",
            "store",
            "audit chain",
            "disk space",
            "configuration",
        ]
        assert report["ok"] is True and text.count("\nok   ") == 6
        day_files = sorted((tether_home / "audit").glob("*.jsonl"))
        records = b"".join(p.read_bytes() for p in day_files)
        assert b"pre-flight check" in records and b"doctor-note" in records

        path = day_files[-1]
        raw = bytearray(path.read_bytes())
        at = raw.index(b"pre-flight") + 1
        raw[at] = ord("X")
        path.write_bytes(bytes(raw))
        text, data = await manage(c, {"action": {"kind": "doctor"}})
        report = one(data)["data"]
        audit = next(ch for ch in report["checks"] if ch["name"] == "audit chain")
        assert report["ok"] is False and audit["ok"] is False and "BROKEN" in audit["detail"]
        assert audit["fix"] and "FAIL audit chain" in text and "1 FAILED" in text


async def test_bad_inputs_are_clear_errors(tether_home: Path) -> None:
    async with shell_client(tether_home) as c:
        a = await open_shell(c)
        await open_shell(c)
        text, _ = await manage(c, {"target": {"sessions": "*"}, "action": {"kind": "close"}})
        assert 'sessions="*" is not allowed for writes' in text
        text, _ = await manage(c, {"action": {"kind": "rename", "newName": "x"}})
        assert "ambiguous for a write" in text and "give target.sessions=<id>" in text
        text, _ = await manage(
            c,
            {
                "target": {"sessions": a},
                "action": {"kind": "rename", "newName": "x"},
                "safety": {"dryrun": True},
            },
        )
        assert "dryrun" in text and "destructive" in text
        text, _ = await manage(c, {"target": {"sessions": a}, "action": {"kind": "doctor"}})
        assert "does not act on particular shells" in text
        text, _ = await manage(
            c, {"target": {"sessions": a}, "action": {"kind": "rename", "newName": "x" * 33}}
        )
        assert "newName: must be at most 32 characters" in text
        _, data = await manage(
            c, {"action": {"kind": "macro-set", "name": "m", "text": "ls", "scope": "shell"}}
        )
        assert "give target.sessions=<id>" in one(data)["error"]
        ManualLocks(Store.open(tether_home)).lock(a, who="alice", why="demo")
        _, data = await manage(c, {"target": {"sessions": a}, "action": {"kind": "resize", "cols": 90}})
        assert "alice" in one(data)["error"] and not one(data)["ok"]
        _, data = await manage(
            c, {"target": {"sessions": a}, "action": {"kind": "close"}, "safety": {"dryrun": True}}
        )
        assert one(data)["ok"]  # a dry run only reads
        _, data = await manage(c, {"target": {"sessions": "dsh-zzzzzz"}, "action": {"kind": "close"}})
        assert "no live shell dsh-zzzzzz" in one(data)["error"]
        _, data = await manage(c, {"action": {"kind": "workspace-restore", "name": "nope"}})
        assert "no workspace named 'nope'" in one(data)["error"]
        text, _ = await manage(c, {"target": {"sessions": a}, "action": {"kind": "close", "name": "x"}})
        assert "name" in text


async def test_a_shell_that_ended_or_was_closed_is_named_as_such(tether_home: Path) -> None:
    # "no live shell X" said nothing of what became of X, nor that a closed one can be revived.
    async with shell_client(tether_home) as c:
        ended, closed = await open_shell(c), await open_shell(c)
        out = await run(c, ended, "exit 3")
        assert "exit status 3" in " ".join(out["lines"]), out
        _, data = await manage(c, {"target": {"sessions": closed}, "action": {"kind": "close"}})
        assert one(data)["ok"], data
        for shell, said in ((ended, "no longer runs"), (closed, "was closed; shell_open with action.from")):
            _, data = await call(
                c, "shell_read", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read"}}]}
            )
            assert f"shell {shell} {said}" in one(data)["error"], data
