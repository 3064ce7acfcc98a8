"""A person in the panel and an agent over MCP, on one ``tether serve`` app, one real tmux server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from browser import chromium, panel_page, screenshot, terminal_text, wait_terminal_contains
from mcp import Client
from panel_harness import TOKEN, agent, serving_tools, text_of

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url


async def _call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    return not result.is_error, text_of(result), result.structured_content or {}


async def _run(client: Client, shell: str, command: str) -> tuple[bool, str]:
    ok, text, _ = await _call(
        client,
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
    return ok, text


@pytest.mark.browser
async def test_person_and_agent_share_a_shell(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        ok, text, structured = await _call(
            client,
            "shell_open",
            {"tasks": [{"action": {"kind": "open", "label": "build", "cols": 100, "rows": 24}}]},
        )
        assert ok, text
        shell = structured["tasks"][0]["shell"]
        ok, text, structured = await _call(
            client, "shell_open", {"tasks": [{"action": {"kind": "open", "label": "tests"}}]}
        )
        assert ok, text
        other = structured["tasks"][0]["shell"]
        ok, text, _ = await _call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": other},
                        "action": {"kind": "run", "command": "sleep 600"},
                        "wait": {"kind": "none"},
                    }
                ]
            },
        )
        assert ok, text

        # The page lists the agent's shell by itself (pushed), owned by a conversation.
        row = page.locator(f'#shells tbody tr[data-id="{shell}"]')
        await row.wait_for(timeout=HANG_MS)
        # Owned by a conversation: its id, under the name its client gave (the SDK's default here).
        assert "conv-" in await row.inner_text() and "mcp 0.1.0" in await row.inner_text()
        assert "build" in await row.inner_text()

        # Open it from the keyboard: a real tmux client attaches, so the shell is "attached" — and
        # attaching is not typing, so it is not "user-busy".
        await page.focus(f'#shells .open-btn[data-shell="{shell}"]')
        await page.keyboard.press("Enter")
        await page.locator(f'#shells tbody tr[data-id="{shell}"] .badge.attached').wait_for(timeout=HANG_MS)
        ok, text, state = await _call(client, "shell_state", {"scope": "*"})
        states = next(r["states"] for r in state["shells"] if r["shell"] == shell)
        assert ok and "attached" in states and "user-busy" not in states, text

        # An agent's output streams into the page's terminal, and its command shows exactly as
        # typed: no wrapper, no marker, nothing of tether's around it.
        command = "echo agent-says-$((20+1))"
        ok, text = await _run(client, shell, command)
        assert ok, text
        await wait_terminal_contains(
            page,
            "agent-says-21",
        )
        shown = await terminal_text(page, shell)
        typed = [line for line in shown.split("\n") if "agent-says" in line and "echo" in line]
        assert [re.sub(r"^.*?[#$] ", "", line) for line in typed] == [command], shown
        assert "6973" not in shown and "__t" not in shown
        # tether's own tmux server has no status bar (it would show inside the terminal).
        status = await anyio.run_process(
            ["tmux", "-S", str(tether_home / "tmux.sock"), "show-options", "-g", "-v", "status"]
        )
        assert status.stdout.decode().strip() == "off"

        # What the person types runs in the shell (the agent reads it back).
        await page.click(f'.cell[data-shell="{shell}"] .cell-term')
        await page.keyboard.type("echo person-$((3*5))")
        await page.keyboard.press("Enter")
        with anyio.fail_after(HANG_S):
            while True:
                ok, text, _ = await _call(
                    client,
                    "shell_read",
                    {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", "mode": "tail"}}]},
                )
                if "person-15" in text:
                    break
                await anyio.sleep(0.05)
        # Ctrl+] leaves the terminal for the list, so the keyboard is never trapped.
        await page.click(f'.cell[data-shell="{shell}"] .cell-term')
        await page.keyboard.press("Control+BracketRight")
        focused = await page.evaluate("document.activeElement.dataset.shell || document.activeElement.id")
        assert focused == shell
        await page.locator(f'#shells tbody tr[data-id="{other}"] .badge.busy').wait_for(timeout=HANG_MS)
        await screenshot(page, "agent-and-person")

        # A person opens a shell of their own from the page: owner "panel", opened in the terminal.
        await page.click("#new-shell-box summary")
        await page.fill('#new-shell input[name="label"]', "notes")
        await page.click('#new-shell button[type="submit"]')
        await page.wait_for_function(
            "(old) => location.hash.startsWith('#/shells/dsh-') && !location.hash.endsWith(old)", arg=shell
        )
        mine = page.url.rsplit("/", 1)[1]
        own_row = page.locator(f'#shells tbody tr[data-id="{mine}"]')
        await own_row.locator(".badge.attached").wait_for(timeout=HANG_MS)
        assert "panel" in await own_row.inner_text() and "notes" in await own_row.inner_text()
        ok, text, state = await _call(client, "shell_state", {"scope": "*", "owner": "panel"})
        assert ok and [r["shell"] for r in state["shells"]] == [mine], text

        # Filters: by owner, by state, by host (every shell here is local).
        await page.select_option("#f-host", "local")
        assert await page.locator("#shells tbody tr").count() == 3
        await page.select_option("#f-host", "")
        await page.select_option("#f-owner", "conversation")
        assert await page.locator("#shells tbody tr").count() == 2
        await page.select_option("#f-owner", "panel")
        assert await page.locator("#shells tbody tr").count() == 1
        await page.select_option("#f-owner", "")
        await page.select_option("#f-state", "attached")
        await own_row.wait_for()
        assert await page.locator(f'#shells tbody tr[data-id="{shell}"]').count() == 0
        await page.select_option("#f-state", "")

        await page.set_viewport_size({"width": 420, "height": 800})
        await page.locator(f'.cell[data-shell="{mine}"] .xterm').wait_for()
        await screenshot(page, "narrow")
