"""A person's typing and manual lock refuse agent writes; the audit view shows all of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from browser import chromium, panel_page, screenshot, wait_terminal_contains
from mcp import Client
from panel_harness import TOKEN, agent, serving_tools, text_of

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url


async def _run(client: Client, shell: str, command: str) -> tuple[bool, str]:
    result = await client.call_tool(
        "shell_run",
        {
            "tasks": [
                {
                    "target": {"sessions": shell},
                    "action": {"kind": "run", "command": command},
                    "wait": {"kind": "exit"},
                }
            ]
        },
    )
    return not result.is_error, text_of(result)


async def _states(client: Client, shell: str) -> list[str]:
    result = await client.call_tool("shell_state", {"scope": "*", "sessions": shell})
    rows: list[dict[str, Any]] = (result.structured_content or {}).get("shells", [])
    return list(rows[0]["states"]) if rows else []


@pytest.mark.browser
async def test_typing_and_locks_refuse_agents_and_the_audit_shows_it(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        opened = await client.call_tool(
            "shell_open",
            {"tasks": [{"action": {"kind": "open", "label": "deploy", "cols": 100, "rows": 24}}]},
        )
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await page.locator(f'#shells tbody tr[data-id="{shell}"] .badge.attached').wait_for(timeout=HANG_MS)

        # A person types: the shell is user-busy and an agent write is refused, saying why.
        await page.click(f'.cell[data-shell="{shell}"] .cell-term')
        await page.keyboard.type("echo person-was-here")
        await page.keyboard.press("Enter")
        # Its echo in the page proves the keystrokes (stamped before they are written) reached tmux.
        await wait_terminal_contains(page, "echo person-was-here")
        ok, text = await _run(client, shell, "echo agent-while-typing")
        assert not ok and "REFUSED" in text and "typing" in text, text
        assert "user-busy" in await _states(client, shell)

        # When the person stops, the agent may write again.
        with anyio.fail_after(HANG_S):
            while "user-busy" in await _states(client, shell):
                await anyio.sleep(0.1)
        ok, text = await _run(client, shell, "echo agent-after-typing")
        assert ok, text
        await wait_terminal_contains(page, "agent-after-typing")

        # Lock from the page (the terminal's own Lock): the agent is refused at once; unlock: it succeeds.
        lock = page.locator(f'.cell[data-shell="{shell}"] .cell-lock')
        await lock.click()
        await page.locator(f'#shells tbody tr[data-id="{shell}"] .badge.locked').first.wait_for(
            timeout=HANG_MS
        )
        ok, text = await _run(client, shell, "echo agent-while-locked")
        assert not ok and "REFUSED" in text and "locked" in text, text
        await screenshot(page, "locked")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-lock[aria-pressed="true"]').wait_for()
        await lock.click()  # now labelled Unlock
        with anyio.fail_after(HANG_S):
            while "locked" in await _states(client, shell):
                await anyio.sleep(0.05)
        ok, text = await _run(client, shell, "echo agent-after-unlock")
        assert ok, text

        # The audit view shows the refusals, the successes and the panel's own actions.
        await page.goto(f"{served.base}/panel/#/audit")
        await page.fill('#audit-filters input[name="shell"]', shell)
        await page.click('#audit-filters button[type="submit"]')
        # The filtered answer (the view first shows every record): every row names the shell.
        await page.wait_for_function(
            """(shell) => { const rows = [...document.querySelectorAll('#audit tbody tr')];
                return rows.length > 0 && rows.every((tr) => tr.cells[4].textContent.includes(shell)); }""",
            arg=shell,
        )
        rows: list[str] = await page.evaluate(
            """() => [...document.querySelectorAll('#audit tbody tr')].map(
                (tr) => [...tr.cells].map((td) => td.textContent).join('\\t'))"""
        )
        refused_tool = [r for r in rows if "shell_run" in r and "refused" in r]
        ok_tool = [r for r in rows if "shell_run" in r and "refused" not in r]
        panel_rows = [r for r in rows if r.split("\t")[1] == "panel"]
        assert len(refused_tool) == 2, rows
        assert len(ok_tool) >= 1, rows
        assert any("lock" in r for r in panel_rows) and any("unlock" in r for r in panel_rows), rows
        assert any("terminal-attach" in r for r in panel_rows), rows
        await page.click("#audit-verify")
        await page.locator("#verify-result.verify-ok").wait_for(timeout=HANG_MS)
        await screenshot(page, "audit")
