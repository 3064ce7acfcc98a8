"""Panel actions through its JSON API on the real ``tether serve`` app: tools as actor panel, audited."""

from __future__ import annotations

from pathlib import Path

from panel_harness import agent, browserless, serving_tools, text_of

from hang import HANG_S
from proc_probe import alive_with, freezer, unique_sleep_arg, wait_until
from tether.audit import query as audit_query
from tether.config import load_config
from tether.store.vault import Vault

PASSPHRASE = "correct horse battery staple"
CANARY = "canary-value-7f3a9c"


async def test_new_shell_from_the_panel_is_owned_by_panel(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page, agent(served) as client:
        opened = await page.post("/panel/api/shells", json={"label": "from-panel"})
        assert opened.status_code == 200, opened.text
        shell = opened.json()["id"]
        assert shell and shell.startswith("dsh-")

        listed = (await page.get("/panel/api/shells")).json()["shells"]
        row = next(r for r in listed if r["id"] == shell)
        assert (row["owner"], row["ownerId"], row["label"]) == ("panel", "panel", "from-panel")

        state = await client.call_tool("shell_state", {"scope": "*", "owner": "panel"})
        assert shell in text_of(state)

        bad = await page.post("/panel/api/shells", json={"label": "x" * 40})
        assert bad.status_code == 400 and bad.json()["error"] == "INVALID_ARGUMENT"
        assert "label" in bad.json()["message"]


async def test_a_malformed_body_is_a_400_with_a_stable_code(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page:
        # Deeper than json.loads reads on every supported Python (10,000 levels on 3.13), and
        # under the body's 64 KiB.
        deep = b"[" * 20_000 + b"1" + b"]" * 20_000
        for body, why in ((deep, "nested too deeply"), (b"{", "not JSON"), (b"[1]", "a JSON object")):
            bad = await page.post(
                "/panel/api/shells", content=body, headers={"Content-Type": "application/json"}
            )
            assert bad.status_code == 400, bad.text
            assert bad.json()["error"] == "INVALID_ARGUMENT" and why in bad.json()["message"]
        assert (await page.get("/panel/api/shells")).json()["shells"] == []  # nothing was opened


async def test_lock_and_unlock_are_recorded_and_shown(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page, agent(served) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]

        locked = await page.post(f"/panel/api/shells/{shell}/lock", json={"reason": "deploying"})
        assert locked.status_code == 200, locked.text
        rows = (await page.get("/panel/api/shells")).json()["shells"]
        assert next(r for r in rows if r["id"] == shell)["lockedBy"] == "panel"

        again = await page.post(f"/panel/api/shells/{shell}/lock", json={})
        assert "already locked" in again.json()["message"]

        unlocked = await page.post(f"/panel/api/shells/{shell}/unlock", json={})
        assert unlocked.status_code == 200 and "unlocked" in unlocked.json()["message"]
        rows = (await page.get("/panel/api/shells")).json()["shells"]
        assert next(r for r in rows if r["id"] == shell)["lockedBy"] is None

        malformed = await page.post("/panel/api/shells/not-a-shell/lock", json={})
        assert malformed.status_code == 400 and "dsh-ab12cd" in malformed.json()["message"]
        unknown = await page.post("/panel/api/shells/dsh-zzzzzz/lock", json={})
        assert unknown.status_code == 404 and "no shell dsh-zzzzzz" in unknown.json()["message"]

    records = [r for r in audit_query(tether_home, source="panel", shell=shell, limit=50)]
    assert [(r.actor, r.tool, r.action, r.outcome, r.reason) for r in records] == [
        ("panel", "shell_lock", "lock", "ok", "deploying"),
        ("panel", "shell_lock", "lock", "ok", None),
        ("panel", "shell_lock", "unlock", "ok", None),
    ]


async def test_vault_groups_unlock_and_lock_without_showing_values(tether_home: Path) -> None:
    vault = Vault.open(load_config(tether_home))
    vault.create_group("ops", PASSPHRASE)
    vault.set("DEPLOY_KEY", CANARY, group="ops", passphrase=PASSPHRASE)

    async with serving_tools(tether_home) as served, browserless(served) as page:
        listing = await page.get("/panel/api/vault")
        assert listing.status_code == 200
        assert CANARY not in listing.text
        group = listing.json()["groups"][0]
        assert (group["name"], group["protected"], group["locked"]) == ("ops", True, True)
        assert listing.json()["items"] == [{"name": "DEPLOY_KEY", "group": "ops", "locked": True}]

        wrong = await page.post("/panel/api/vault/ops/unlock", json={"passphrase": "guess"})
        assert wrong.status_code in (400, 403), wrong.text
        assert PASSPHRASE not in wrong.text and "guess" not in wrong.text

        right = await page.post("/panel/api/vault/ops/unlock", json={"passphrase": PASSPHRASE, "minutes": 5})
        assert right.status_code == 200, right.text
        assert vault.group_info("ops").locked is False
        assert CANARY not in right.text

        relock = await page.post("/panel/api/vault/ops/lock", json={})
        assert relock.status_code == 200
        assert vault.group_info("ops").locked is True

        missing = await page.post("/panel/api/vault/nope/lock", json={})
        assert missing.status_code == 404

    records = audit_query(tether_home, source="panel", limit=50)
    vault_records = [(r.action, r.outcome, r.targets) for r in records if r.tool == "vault"]
    assert vault_records[:3] == [
        ("unlock", "refused", ("ops",)),
        ("unlock", "ok", ("ops",)),
        ("lock", "ok", ("ops",)),
    ]
    for day_file in (tether_home / "audit").iterdir():
        text = day_file.read_text()
        assert PASSPHRASE not in text and CANARY not in text and "guess" not in text


async def test_audit_view_filters_and_verifies(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page:
        await page.post("/panel/api/shells", json={"label": "a"})
        shells = (await page.get("/panel/api/shells")).json()["shells"]
        shell = shells[0]["id"]
        await page.post(f"/panel/api/shells/{shell}/lock", json={})

        everything = (await page.get("/panel/api/audit")).json()["records"]
        assert any(r["action"] == "lock" and r["source"] == "panel" for r in everything)
        by_shell = (await page.get("/panel/api/audit", params={"shell": shell})).json()["records"]
        assert by_shell and all(shell in r["targets"] for r in by_shell)
        by_source = (await page.get("/panel/api/audit", params={"source": "cli"})).json()["records"]
        assert by_source == []
        day = everything[-1]["time"][:10]
        assert (await page.get("/panel/api/audit", params={"day": day})).json()["records"]
        bad_day = await page.get("/panel/api/audit", params={"day": "yesterday"})
        assert bad_day.status_code == 400 and "YYYY-MM-DD" in bad_day.json()["message"]

        verified = (await page.post("/panel/api/audit/verify", json={})).json()
        assert verified["ok"] is True and verified["records"] >= 1

        day_file = next((tether_home / "audit").glob("*.jsonl"))
        raw = bytearray(day_file.read_bytes())
        raw[raw.index(b'"lock"') + 1] ^= 0x01  # flip one byte of a record
        day_file.write_bytes(bytes(raw))
        broken = (await page.post("/panel/api/audit/verify", json={})).json()
        assert broken["ok"] is False and "BROKEN" in broken["summary"]


async def test_rename_snapshot_close_and_workspace_restore(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page, agent(served) as client:
        opened = await client.call_tool(
            "shell_open", {"tasks": [{"action": {"kind": "open", "label": "web"}}]}
        )
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        saved = await client.call_tool(
            "shell_manage", {"tasks": [{"action": {"kind": "workspace-save", "name": "dev"}}]}
        )
        assert not saved.is_error, text_of(saved)

        renamed = await page.post(f"/panel/api/shells/{shell}/rename", json={"name": "frontend"})
        assert renamed.status_code == 200, renamed.text
        rows = (await page.get("/panel/api/shells")).json()["shells"]
        assert next(r for r in rows if r["id"] == shell)["label"] == "frontend"
        too_long = await page.post(f"/panel/api/shells/{shell}/rename", json={"name": "n" * 40})
        assert too_long.status_code == 400 and "newName" in too_long.json()["message"]

        snap = await page.post(f"/panel/api/shells/{shell}/snapshot", json={})
        assert snap.status_code == 200 and f"snapshot {shell}" in snap.json()["message"]

        spaces = (await page.get("/panel/api/workspaces")).json()["workspaces"]
        assert spaces == [{"name": "dev", "shells": 1}]
        restored = await page.post("/panel/api/workspaces/dev/restore", json={})
        assert restored.status_code == 200 and "restored workspace 'dev'" in restored.json()["message"]
        missing = await page.post("/panel/api/workspaces/nope/restore", json={})
        assert missing.status_code in (400, 404) and "nope" in missing.json()["message"]

        closed = await page.post(f"/panel/api/shells/{shell}/close", json={})
        assert closed.status_code == 200, closed.text
        rows = (await page.get("/panel/api/shells")).json()["shells"]
        assert shell not in [r["id"] for r in rows]
        assert [r["owner"] for r in rows] == ["panel"]  # the restored shell is the panel's
        gone = await page.post(f"/panel/api/shells/{shell}/close", json={})
        # Closing it again is NOT_FOUND, a 404 like a timeline or recording of no such shell.
        assert (gone.status_code, gone.json()["error"]) == (404, "NOT_FOUND"), gone.text

    panel_tools = [
        (r.tool, r.action, r.outcome)
        for r in audit_query(tether_home, source="panel", limit=50)
        if r.tool == "shell_manage"
    ]
    assert ("shell_manage", "rename", "ok") in panel_tools
    assert ("shell_manage", "snapshot", "ok") in panel_tools
    assert ("shell_manage", "workspace-restore", "ok") in panel_tools
    assert ("shell_manage", "close", "ok") in panel_tools
    assert all(r.actor == "panel" for r in audit_query(tether_home, source="panel", limit=50))


async def test_a_close_from_the_panel_says_which_processes_it_could_not_end(tether_home: Path) -> None:
    # A process in a frozen cgroup outlives every signal: the page's message and the panel's audit
    # record name it (pid, command line).
    (tether_home / "config.toml").write_text("[shell]\ngrace_ms = 100\n")
    token = unique_sleep_arg()
    with freezer() as freeze:
        async with serving_tools(tether_home) as served, browserless(served) as page, agent(served) as client:
            opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            shell = (opened.structured_content or {})["tasks"][0]["shell"]
            ran = await client.call_tool(
                "shell_run",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "run", "command": f"sleep {token} &"},
                        }
                    ]
                },
            )
            assert not ran.is_error, text_of(ran)
            assert wait_until(lambda: bool(alive_with(token)))
            [pid] = alive_with(token)
            freeze(pid)
            # The close waits out the grace and the bound after SIGKILL: longer than httpx's 5 s.
            closed = await page.post(f"/panel/api/shells/{shell}/close", json={}, timeout=HANG_S)
            assert closed.status_code == 200, closed.text
            said = f"still running after SIGKILL: pid {pid} (sleep {token})"
            assert said in closed.json()["message"]
    [record] = [
        r
        for r in audit_query(tether_home, source="panel", limit=50)
        if r.tool == "shell_manage" and r.action == "close"
    ]
    assert record.outcome == "ok" and said in record.detail
