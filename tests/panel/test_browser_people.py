"""Two people at the panel, each signed in with access of their own, on two chromium pages: each
answer to an agent's question is recorded and shown with the name of whoever gave it, and revoking
one person sends their open page to the sign-in page at once while the other's page lives on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from browser import chromium, panel_page
from mcp import Client
from panel_harness import agent, open_shells, serving_tools
from playwright.async_api import Page

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url
from tether.store.db import Store
from tether.store.panel_people import PanelPeople

pytestmark = pytest.mark.timeout(240)


def _approvals(home: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for day in sorted((home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    return [r for r in records if r.get("action") == "approval"]


async def _asked_and_answered(
    client: Client, shell: str, command: str, answerer: Page, watcher: Page, *, approve: bool, words: str
) -> tuple[str, str]:
    """The agent's guarded command waits for a person; ``answerer`` answers it with ``words``.
    The question's id and the agent's task as it ended."""
    task: dict[str, Any] = {}

    async def ask() -> None:
        run = {
            "target": {"sessions": shell},
            "action": {"kind": "run", "command": command},
            "wait": {"kind": "exit"},
        }
        result = await client.call_tool("shell_run", {"tasks": [run]})
        task.update((result.structured_content or {})["tasks"][0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        for page in (answerer, watcher):
            await page.locator("#approval-list li.approval").wait_for(timeout=HANG_MS)
        entry = answerer.locator("#approval-list li.approval")
        approval = await entry.get_attribute("data-id")
        await entry.locator('input[name="reason"]').fill(words)
        await entry.locator("button.approve" if approve else "button.deny").click()
    assert approval is not None
    return approval, json.dumps(task)


@pytest.mark.browser
async def test_two_people_answer_by_name_and_revoking_one_closes_only_their_page(
    tether_home: Path, tmp_path: Path
) -> None:
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    outside = tmp_path / "not-a-repo"  # a push approved here fails harmlessly
    outside.mkdir()
    people = PanelPeople(Store.open(tether_home), tether_home)
    try:
        _, alices = people.add("alice")
        _, bobs = people.add("bob")
        async with (
            serving_tools(tether_home) as served,
            agent(served) as client,
            chromium() as browser,
            panel_page(browser, login_url(served.base, alices)) as alice,
            panel_page(browser, login_url(served.base, bobs)) as bob,
        ):
            for page, name in ((alice, "alice"), (bob, "bob")):
                await page.goto(f"{served.base}/panel/#/shells")
                signed = page.locator("#signed-in")
                await signed.wait_for(timeout=HANG_MS)
                assert await signed.inner_text() == f"signed in as {name}"
            [shell] = await open_shells(client, cwd=str(outside))

            first, _ = await _asked_and_answered(
                client,
                shell,
                "git push --force origin main; echo a=$?",
                alice,
                bob,
                approve=True,
                words="go ahead",
            )
            second, denied = await _asked_and_answered(
                client,
                shell,
                "git push --force origin dev; echo b=$?",
                bob,
                alice,
                approve=False,
                words="not dev",
            )
            assert "bob at the panel" in denied and "not dev" in denied, denied
            shown = {
                first: f'{first} approved by alice at the panel: "go ahead"',
                second: f'{second} denied by bob at the panel: "not dev"',
            }
            for page in (alice, bob):
                for approval, outcome in shown.items():
                    decided = page.locator(f'#approval-decided li[data-id="{approval}"]')
                    await decided.wait_for(timeout=HANG_MS)
                    assert outcome in await decided.inner_text()

            # `tether panel revoke alice`, from another process's store: her page loses access at once.
            await anyio.to_thread.run_sync(lambda: people.revoke("alice"))
            await alice.wait_for_url("**/panel/login", timeout=HANG_MS)
            note = alice.locator(".login [role=alert]")
            await note.wait_for(timeout=HANG_MS)
            assert "panel access of alice was revoked" in await note.inner_text()
            # Bob's page lives on: a new shell shows up in his list.
            [later] = await open_shells(client)
            await bob.locator(f'#shells tbody tr[data-id="{later}"]').wait_for(timeout=HANG_MS)
            assert await bob.locator("#live").inner_text() == "live"
    finally:
        people.store.close()
    records = _approvals(tether_home)
    assert [(r["extra"]["answer"], r["actor"], r["detail"], r["reason"]) for r in records] == [
        ("approved", "panel:alice", "approved by alice at the panel", "go ahead"),
        ("denied", "panel:bob", "denied by bob at the panel", "not dev"),
    ]
