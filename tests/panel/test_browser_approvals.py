"""Person approvals in the panel, driven in chromium: an agent's ``shell_open`` escalation waits
as a pending question; the person approves one and denies another; each decision is audited; a
confined shell stays confined for what a person types in the panel too."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest
from browser import chromium, panel_page, screenshot, wait_terminal_contains
from mcp import Client
from panel_harness import TOKEN, agent, browserless, open_shells, serving_tools, text_of
from playwright.async_api import Page

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url

pytestmark = pytest.mark.timeout(240)


def _approval_records(home: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for day in sorted((home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    return [r for r in records if r.get("action") == "approval"]


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _ask_and_answer(
    client: Client, page: Page, justification: str, *, approve: bool, reason: str
) -> tuple[bool, str, dict[str, Any]]:
    """The agent asks for ``allow_host_write`` while the person answers in the page."""
    outcome: dict[str, Any] = {}

    async def ask() -> None:
        action = {"kind": "open", "sandbox_permissions": "allow_host_write", "justification": justification}
        outcome["result"] = await client.call_tool("shell_open", {"tasks": [{"action": action}]})

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        entry = page.locator("#approval-list li.approval").filter(has_text=justification)
        await entry.wait_for(timeout=HANG_MS)
        question = await entry.inner_text()
        await entry.locator('input[name="reason"]').fill(reason)
        await entry.locator("button.approve" if approve else "button.deny").click()
        await entry.wait_for(state="detached", timeout=HANG_MS)
    result = outcome["result"]
    return (
        not result.is_error,
        text_of(result),
        {"question": question, "structured": result.structured_content},
    )


@pytest.mark.browser
async def test_a_person_approves_and_denies_escalations_in_the_panel(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text(
        f'[shell]\nprovider = "sandbox"\n[approvals]\ntimeout_s = {HANG_S}\n'
    )
    outside = Path("/var/tmp") / f"tether-approved-{secrets.token_hex(4)}"
    typed_target = f"/etc/tether-typed-{secrets.token_hex(4)}"
    try:
        async with (
            serving_tools(tether_home) as served,
            agent(served) as client,
            chromium() as browser,
            panel_page(browser, login_url(served.base, TOKEN)) as page,
        ):
            await page.goto(f"{served.base}/panel/#/shells")
            ok, text, seen = await _ask_and_answer(
                client, page, "write the build cache in /var/tmp", approve=True, reason="just this once"
            )
            assert ok, text
            assert (
                "allow_host_write" in seen["question"]
                and "write the build cache in /var/tmp" in seen["question"]
            )
            shell = seen["structured"]["tasks"][0]["shell"]
            run = {
                "target": {"sessions": shell},
                "action": {
                    "kind": "run",
                    "command": f"echo granted > {outside}; echo hi > /dev/tcp/127.0.0.1/9; true",
                },
                "wait": {"kind": "exit"},
            }
            granted = (await client.call_tool("shell_run", {"tasks": [run]})).structured_content or {}
            sandbox = granted["tasks"][0]["sandbox"]
            assert sandbox["permissions"] == "allow_host_write"
            assert [d["kind"] for d in sandbox["denials"]] == ["network"]  # granted writes, not the network
            assert outside.read_text() == "granted\n"

            ok, text, _ = await _ask_and_answer(
                client, page, "install a package globally", approve=False, reason="not on this machine"
            )
            assert not ok and "person at the panel denied sandbox_permissions" in text, text

            # A person typing in a confined shell is confined too (the pane's shell is in the sandbox).
            opened = await client.call_tool(
                "shell_open", {"tasks": [{"action": {"kind": "open", "cols": 100}}]}
            )
            plain = (opened.structured_content or {})["tasks"][0]["shell"]
            await page.goto(f"{served.base}/panel/#/shells/{plain}")
            await page.locator(f'#shells tbody tr[data-id="{plain}"] .badge.attached').wait_for(
                timeout=HANG_MS
            )
            await page.click(f'.cell[data-shell="{plain}"] .cell-term')
            await page.keyboard.type(f"touch {typed_target}; echo typed=$?")
            await page.keyboard.press("Enter")
            await wait_terminal_contains(page, "typed=1")
            await screenshot(page, "approvals")
    finally:
        outside.unlink(missing_ok=True)
    assert not _exists(typed_target)
    records = _approval_records(tether_home)
    answers = [(r["extra"]["answer"], r["actor"], r["source"], r["reason"]) for r in records]
    assert answers == [
        ("approved", "person at the panel", "panel", "just this once"),
        ("denied", "person at the panel", "panel", "not on this machine"),
    ]
    assert all(r["tool"] == "shell_open" and r["extra"]["mode"] == "allow_host_write" for r in records)


@pytest.mark.browser
async def test_a_reason_being_typed_survives_other_questions_coming_and_going(
    tether_home: Path, tmp_path: Path
) -> None:
    """The list is pushed again whenever a question arrives or leaves: the reason a person is
    typing in another question's field keeps its text and the keyboard focus (keys typed next go on
    into it, not to the panel's shortcuts — ``x`` would detach the terminal)."""
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    outside = tmp_path / "not-a-repo"  # the pushes are denied; outside a repository in any case
    outside.mkdir()
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        browserless(served) as http,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        opened = await client.call_tool(
            "shell_open", {"tasks": [{"action": {"kind": "open", "count": 2, "cwd": str(outside)}}]}
        )
        first, second = [t["shell"] for t in (opened.structured_content or {})["tasks"]]
        await page.goto(f"{served.base}/panel/#/shells/{first}")
        await page.locator(f'.cell[data-shell="{first}"]').wait_for(timeout=HANG_MS)
        answers: dict[str, Any] = {}

        async def ask(shell: str, tag: str) -> None:
            run = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": f"git push --force origin main; echo {tag}=$?"},
                "wait": {"kind": "exit"},
            }
            answers[tag] = (await client.call_tool("shell_run", {"tasks": [run]})).structured_content

        # The reason field of the item first shown (tagged), its text and whether it has the focus.
        typed = """() => { const i = document.querySelector("#approval-list li[data-tag='mine'] input");
            return i && [i.value, document.activeElement === i]; }"""
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, first, "asked_first")
            mine = page.locator("#approval-list li.approval").filter(has_text="asked_first")
            await mine.wait_for(timeout=HANG_MS)
            await mine.evaluate("(li) => { li.dataset.tag = 'mine'; }")  # the same node, later
            await mine.locator('input[name="reason"]').click()
            await page.keyboard.type("fine by me")

            tg.start_soon(ask, second, "asked_second")
            other = page.locator("#approval-list li.approval").filter(has_text="asked_second")
            await other.wait_for(timeout=HANG_MS)
            kept = await page.evaluate(typed)
            assert kept == ["fine by me", True]
            await page.keyboard.type(" x")  # `x` outside a field detaches the focused terminal

            # The other question is answered elsewhere (another page): it leaves, this one stays.
            other_id = await other.get_attribute("data-id")
            denied = await http.post(f"/panel/api/approvals/{other_id}", json={"approve": False})
            assert denied.status_code == 200, denied.text
            await other.wait_for(state="detached", timeout=HANG_MS)
            await page.keyboard.type(" tl")  # `t` would open the timeline, `l` lock the shell
            kept = await page.evaluate(typed)
            assert kept == ["fine by me x tl", True]
            assert await page.locator(f'.cell[data-shell="{first}"]').count() == 1
            await mine.locator("button.deny").click()
            await mine.wait_for(state="detached", timeout=HANG_MS)
    assert 'denied it: "fine by me x tl"' in answers["asked_first"]["tasks"][0]["error"], answers
    assert not answers["asked_second"]["tasks"][0]["ok"]


@pytest.mark.browser
async def test_every_page_shows_who_decided_and_a_stale_answer_is_told_whose_counted(
    tether_home: Path, tmp_path: Path
) -> None:
    """Three people watch one question. One denies it from the keyboard; the others' pages saw it
    vanish with no word of what became of it, and the denier's focus fell to the page (where the
    next key fires a shortcut). A fourth answer from a page that missed the push (its socket held)
    was told only "is denied". Now every page lists it under *Decided lately* with who decided and
    their words, the focus lands on that outcome, the stale answer is told whose decision counted,
    and the audit log holds that one decision."""
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    held = anyio.Event()

    async def stale(ws: Any) -> None:  # the events socket of a page that stops hearing pushes
        server = ws.connect_to_server()
        server.on_message(lambda message: None if held.is_set() else ws.send(message))

    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as denier,
        panel_page(browser, login_url(served.base, TOKEN)) as watcher,
        panel_page(browser, login_url(served.base, TOKEN)) as late,
    ):
        await late.route_web_socket("**/ws/events", stale)
        [shell] = await open_shells(client, cwd=str(outside))
        for page in (denier, watcher, late):
            await page.goto(f"{served.base}/panel/#/shells")
        await late.reload()  # its socket was opened at sign-in, before the route
        answer: dict[str, Any] = {}

        async def ask() -> None:
            run = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": "git push --force origin main; echo pushed=$?"},
                "wait": {"kind": "exit"},
            }
            answer["task"] = (await client.call_tool("shell_run", {"tasks": [run]})).structured_content

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            for page in (denier, watcher, late):
                await page.locator("#approval-list li.approval").wait_for(timeout=HANG_MS)
            approval = await denier.locator("#approval-list li.approval").get_attribute("data-id")
            held.set()
            await denier.locator('#approval-list input[name="reason"]').click()
            await denier.keyboard.type("not on main")
            await denier.keyboard.press("Tab")  # Approve
            await denier.keyboard.press("Tab")  # Deny
            await denier.keyboard.press("Enter")
        outcome = f'{approval} denied by person at the panel: "not on main"'
        for page in (denier, watcher):
            decided = page.locator(f'#approval-decided li[data-id="{approval}"]')
            await decided.wait_for(timeout=HANG_MS)
            assert outcome in await decided.inner_text()
            assert await page.locator("#approval-list li").count() == 0
        focused = await denier.evaluate("() => document.activeElement.closest('li')?.dataset.id")
        assert focused == approval  # on the outcome, not dropped to the page

        # The page that missed the push still offers the question; its answer does not count.
        await late.locator("#approval-list li.approval button.approve").click()
        toast = late.locator("#toast.error")
        await toast.wait_for(timeout=HANG_MS)
        said = await toast.inner_text()
        assert f"approval {approval} was already denied by person at the panel at" in said, said
        assert '(their words: "not on main"); your answer did not count' in said, said
    assert 'denied it: "not on main"' in answer["task"]["tasks"][0]["error"], answer
    records = _approval_records(tether_home)
    assert [(r["extra"]["answer"], r["actor"], r["reason"]) for r in records] == [
        ("denied", "person at the panel", "not on main")
    ]
