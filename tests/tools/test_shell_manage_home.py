"""shell_manage over MCP: macros, vault-list, workspaces; the idle sweep's snapshot and limits."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from mcp import Client
from shell_harness import call, open_shell, run, shell_client, tmux

from tether import shells as sh
from tether.config import load_config
from tether.shells import Shells
from tether.shells.idle import close_idle
from tether.shells.records import now_ms
from tether.shells.requests import Wait
from tether.store.db import Store
from tether.store.vault import Vault
from tether.store.workspaces import ShellDescriptor, WorkspaceStore
from writes import write


async def manage(client: Client, *tasks: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return await call(client, "shell_manage", {"tasks": list(tasks)})


def one(data: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = data["tasks"][0]
    return task


async def test_macro_set_list_history_restore_rm(tether_home: Path) -> None:
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        _, data = await manage(
            c, {"action": {"kind": "macro-set", "name": "t", "text": "make test", "note": "v1"}}
        )
        first = one(data)["data"]["macro"]
        assert first["scope"] == "conversation" and first["submit"] is True
        await manage(c, {"action": {"kind": "macro-set", "name": "t", "text": "make check", "submit": False}})
        await manage(
            c, {"action": {"kind": "macro-set", "name": "g", "text": "git status", "scope": "global"}}
        )
        _, data = await manage(
            c,
            {
                "target": {"sessions": shell},
                "action": {"kind": "macro-set", "name": "s", "text": "ls", "scope": "shell"},
            },
        )
        assert one(data)["shell"] == shell and one(data)["data"]["macro"]["scope"] == "shell"

        text, data = await manage(c, {"action": {"kind": "macro-list"}})
        listed = {m["name"]: m for m in one(data)["data"]["macros"]}
        assert set(listed) == {"t", "g", "s"}  # mine is one shell: its shell scope is seen
        assert listed["t"]["text"] == "make check" and listed["t"]["submit"] is False

        _, data = await manage(c, {"action": {"kind": "macro-history", "name": "t"}})
        history = one(data)["data"]["history"]
        assert [h["text"] for h in history] == ["make test", "make check"]
        assert history[0]["note"] == "v1"
        audit = "".join(
            p.read_text(encoding="utf-8") for p in sorted((tether_home / "audit").glob("*.jsonl"))
        )
        assert '"action":"macro-note"' in audit and "/t: v1" in audit
        _, data = await manage(c, {"action": {"kind": "macro-restore", "name": "t", "at": history[0]["at"]}})
        assert one(data)["data"]["macro"]["text"] == "make test"
        _, data = await manage(c, {"action": {"kind": "macro-history", "name": "t"}})
        again = one(data)["data"]["history"]
        assert again[-1]["op"] == "restore" and again[-1]["restoredFrom"] == history[0]["at"]

        text, data = await manage(
            c, {"action": {"kind": "macro-rm", "name": "t"}, "safety": {"dryrun": True}}
        )
        assert "nothing was done" in text and one(data)["data"]["wouldRemove"]["text"] == "make test"
        _, data = await manage(c, {"action": {"kind": "macro-list"}})
        assert "t" in {m["name"] for m in one(data)["data"]["macros"]}
        await manage(c, {"action": {"kind": "macro-rm", "name": "t"}})
        _, data = await manage(c, {"action": {"kind": "macro-list"}})
        assert "t" not in {m["name"] for m in one(data)["data"]["macros"]}
        _, data = await manage(c, {"action": {"kind": "macro-rm", "name": "t"}})
        assert "t" in one(data)["error"] and not one(data)["ok"]

    async with shell_client(tether_home, "conv-b") as other:
        _, data = await manage(other, {"action": {"kind": "macro-list"}})
        assert {m["name"] for m in one(data)["data"]["macros"]} == {"g"}  # only the global one


async def test_vault_list_shows_names_groups_and_locks_never_values(tether_home: Path) -> None:
    vault = Vault(Store.open(tether_home), tether_home)
    vault.set("API_TOKEN", "canary-value-93a1")
    vault.create_group("prod", passphrase="pass phrase")
    vault.set("DB_PASS", "canary-db-77f2", group="prod", passphrase="pass phrase")
    async with shell_client(tether_home) as c:
        text, data = await manage(c, {"action": {"kind": "vault-list"}})
    assert "canary" not in text and "canary" not in repr(data)
    listed = one(data)["data"]
    secrets = {s["name"]: s for s in listed["secrets"]}
    assert secrets["API_TOKEN"]["locked"] is False and secrets["DB_PASS"]["locked"] is True
    assert secrets["DB_PASS"]["group"] == "prod"
    groups = {g["name"]: g for g in listed["groups"]}
    assert groups["prod"]["protected"] and groups["prod"]["locked"]
    assert "tether vault unlock prod" in text


async def test_workspace_save_close_restore_delete_and_max_sessions(
    tether_home: Path, tmp_path: Path
) -> None:
    (tether_home / "config.toml").write_text("[sessions]\nmax_sessions = 3\n", encoding="utf-8")
    dirs = [tmp_path / "api", tmp_path / "web"]
    for d in dirs:
        d.mkdir()
    async with shell_client(tether_home) as c:
        a = await open_shell(c, label="api", cwd=str(dirs[0]))
        b = await open_shell(c, label="web", cwd=str(dirs[1]), cols=100, rows=20)
        await run(c, b, "cd /tmp")  # the live cwd is saved, not the opening one
        _, data = await manage(c, {"action": {"kind": "workspace-save", "name": "dev"}})
        saved = one(data)["data"]["shells"]
        assert sorted((s["label"], s["cwd"]) for s in saved) == [("api", str(dirs[0])), ("web", "/tmp")]

        third = await open_shell(c, label="extra")
        _, data = await manage(c, {"action": {"kind": "workspace-restore", "name": "dev"}})
        assert "maxSessions=3" in one(data)["error"]
        _, state = await call(c, "shell_state", {"scope": "*"})
        assert len(state["shells"]) == 3  # nothing was opened

        for shell in (a, b, third):
            await manage(c, {"target": {"sessions": shell}, "action": {"kind": "close"}})
        _, data = await manage(c, {"action": {"kind": "workspace-restore", "name": "dev"}})
        opened = one(data)["data"]["opened"]
        assert sorted((o["label"], o["cwd"]) for o in opened) == [("api", str(dirs[0])), ("web", "/tmp")]
        _, state = await call(c, "shell_state", {})
        assert {s["shell"] for s in state["shells"]} == {o["shell"] for o in opened}  # owned by the caller
        web = next(s for s in state["shells"] if s["label"] == "web")
        assert web["cwd"] == "/tmp"

        _, data = await manage(c, {"action": {"kind": "workspace-list"}})
        assert [w["name"] for w in one(data)["data"]["workspaces"]] == ["dev"]
        text, _ = await manage(
            c, {"action": {"kind": "workspace-delete", "name": "dev"}, "safety": {"dryrun": True}}
        )
        assert "would delete workspace 'dev'" in text
        _, data = await manage(c, {"action": {"kind": "workspace-list"}})
        assert len(one(data)["data"]["workspaces"]) == 1
        await manage(c, {"action": {"kind": "workspace-delete", "name": "dev"}})
        _, data = await manage(c, {"action": {"kind": "workspace-list"}})
        assert one(data)["data"]["workspaces"] == []


async def test_a_workspace_that_cannot_be_restored_whole_opens_nothing(tether_home: Path) -> None:
    # A workspace saved with a host since removed from config.toml: its first shell was opened, then
    # the second's host was refused, and the error did not name the shell already opened; a retry
    # opened it again. Every host is now checked before any shell is opened.
    WorkspaceStore(Store.open(tether_home)).save(
        "mixed",
        [
            ShellDescriptor(label="here", cwd="/tmp", cols=80, rows=24),
            ShellDescriptor(label="there", cwd="/tmp", cols=80, rows=24, host="gone"),
        ],
        actor="earlier",
    )
    async with shell_client(tether_home) as c:
        for _ in range(2):
            _, data = await manage(c, {"action": {"kind": "workspace-restore", "name": "mixed"}})
            assert one(data)["errorCode"] == "INVALID_ARGUMENT", data
            assert "workspace 'mixed' shell 'there': host: no host 'gone' is configured" in one(data)["error"]
            _, state = await call(c, "shell_state", {"scope": "*"})
            assert state["shells"] == []  # nothing was opened


async def test_a_shell_whose_pane_a_person_shrank_can_still_be_saved(tether_home: Path) -> None:
    # A person's small terminal attached (or a resize) left the pane 12x3: workspace-save refused
    # the whole workspace ("cols 12 is outside 20-1000"), which the agent could not fix. The size
    # is saved as the nearest one a shell reopens with, and the result says so.
    name = 'dev/é "q"; rm -rf ~'  # any printable name, kept as given
    async with shell_client(tether_home) as c:
        shell = await open_shell(c, label="small")
        tmux(tether_home, "resize-window", "-t", shell, "-x", "12", "-y", "3")
        text, data = await manage(
            c, {"target": {"sessions": shell}, "action": {"kind": "workspace-save", "name": name}}
        )
        assert one(data)["ok"], data
        assert f"[{shell}'s pane is 12x3; saved as 20x5]" in text
        await manage(c, {"target": {"sessions": shell}, "action": {"kind": "close"}})
        text, data = await manage(c, {"action": {"kind": "workspace-restore", "name": name}})
        (opened,) = one(data)["data"]["opened"]
        assert f"opened {opened['shell']} label=small" in text and " 20x5" in text
        _, state = await call(c, "shell_state", {"scope": "*", "verbose": True})
        (restored,) = state["shells"]
        assert (restored["shell"], restored["label"]) == (opened["shell"], "small")


def _closed(home: Path) -> set[str]:
    conn = sqlite3.connect(home / "tether.db")
    return {r[0] for r in conn.execute("SELECT id FROM shells WHERE closed_ms IS NOT NULL")}


async def test_idle_sweep_honours_limits_and_snapshots(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text(
        "[sessions]\nidle_close = true\nidle_close_minutes = 30\n", encoding="utf-8"
    )
    engine = Shells.get(load_config(tether_home))
    try:
        own, _ = await sh.open_shell(
            engine, owner="t", label="own", cwd=None, cols=80, rows=24, idle_minutes=5
        )
        never, _ = await sh.open_shell(
            engine, owner="t", label="never", cwd=None, cols=80, rows=24, idle_minutes=0
        )
        default, _ = await sh.open_shell(
            engine, owner="t", label="dflt", cwd=None, cols=80, rows=24, idle_minutes=None
        )
        now = now_ms()
        # Reading the screen is not activity: a capture changes nothing below.
        host, pane = await engine.pane(own.id)
        await host.capture(pane)
        assert await close_idle(engine, now + 4 * 60_000) == []
        assert await close_idle(engine, now + 6 * 60_000) == [own.id]
        assert sorted(await close_idle(engine, now + 31 * 60_000)) == [default.id]
        assert await close_idle(engine, now + 1440 * 60_000) == []
        assert _closed(tether_home) == {own.id, default.id}
        live = await engine.live()
        assert never.id in live and own.id not in live
        rows = sqlite3.connect(tether_home / "tether.db").execute(
            "SELECT shell_id, reason, label FROM snapshots ORDER BY shell_id"
        )
        assert sorted(rows) == sorted([(own.id, "idle", "own"), (default.id, "idle", "dflt")])
    finally:
        await engine.close()


async def test_idle_sweep_switch_off_never_closes_unset_shells(tether_home: Path) -> None:
    engine = Shells.get(load_config(tether_home))
    try:
        shell, _ = await sh.open_shell(
            engine, owner="t", label="x", cwd=None, cols=80, rows=24, idle_minutes=None
        )
        busy, _ = await sh.open_shell(
            engine, owner="t", label="y", cwd=None, cols=80, rows=24, idle_minutes=1
        )
        # A foreground command: not idle (the run returns once sleep is in the pane's tree).
        w = write(busy.id, Wait(kind="noproc", proc="not-running-here", timeout_ms=10_000))
        await sh.run(engine, w, "sleep 30")
        host, pane = await engine.pane(busy.id)
        assert (await host.foreground(pane)).command == "sleep"
        assert await close_idle(engine, now_ms() + 10_000 * 60_000) == []
        assert {shell.id, busy.id} <= set(await engine.live())
    finally:
        await engine.close()
