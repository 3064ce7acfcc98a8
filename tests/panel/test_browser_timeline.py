"""The command timeline of a shell in the page: an agent's and a person's commands with their exit
codes and authors (the conversation by its client's name, or the person), a jump to a command's
output, and its whole output copied to the clipboard."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest
from browser import chromium, clipboard, panel_page, publish_screenshot, screenshot, wait_terminal_contains
from panel_harness import TOKEN, agent, open_shells, run_in, serving_tools
from playwright.async_api import Page

from hang import HANG_S
from tether.panel.app import login_url

CLIENT = types.Implementation(name="claude-code", version="2.1.0")


async def _rows(page: Page) -> list[list[str]]:
    found: list[list[str]] = await page.evaluate(
        """() => [...document.querySelectorAll('#timeline tbody tr')].map(
            (tr) => [...tr.children].slice(2, 5).map((td) => td.textContent.trim()))"""
    )
    return found


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_the_timeline_lists_agent_and_person_commands_and_jumps_to_output(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served, client_info=CLIENT) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, label="build", cols=100, rows=24)
        assert (await run_in(client, shell, "seq 1 5"))["exitCode"] == 0
        assert (await run_in(client, shell, "sh -c 'exit 3'"))["exitCode"] == 3
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await wait_terminal_contains(page, "exit 3")
        # A person types a command that fails: it is in the timeline too, as the person's, who
        # pressed Enter at the panel (here whoever holds the serve token).
        await page.click(f'.cell[data-shell="{shell}"] .cell-term')
        await page.keyboard.type("echo person-$((2+2)); false")
        await page.keyboard.press("Enter")
        await wait_terminal_contains(page, "person-4")

        await page.keyboard.press("Control+BracketRight")  # out of the terminal, then the shortcut
        await page.keyboard.press("t")
        expected = [
            ["✗ 1", "person at the panel", "echo person-$((2+2)); false"],
            ["✗ 3", "agent claude-code 2.1.0", "sh -c 'exit 3'"],
            ["✓ 0", "agent claude-code 2.1.0", "seq 1 5"],
        ]
        with anyio.fail_after(HANG_S):  # newest first; the person's command arrives with the next push
            while await _rows(page) != expected:
                await anyio.sleep(0.05)
        started = await page.locator("#timeline tbody tr").first.locator("td").first.inner_text()
        assert started.count(":") == 2  # a clock time

        # Jump (Enter on a command): the terminal shows where it ran (selected), its output below.
        # The rows are rebuilt on every push (here: the agent runs another command meanwhile), and
        # the row a person moved to keeps the focus, so Enter still jumps from it.
        seq_row = page.locator("#timeline tbody tr", has_text="seq 1 5")
        await seq_row.focus()
        with anyio.fail_after(HANG_S):  # refused while the person's typing is recent: retried
            while (await run_in(client, shell, "true"))["exitCode"] != 0:
                await anyio.sleep(0.2)
            while len(await _rows(page)) != 4:
                await anyio.sleep(0.05)
        await page.keyboard.press("Enter")
        await page.locator("#output-view:not([hidden])").wait_for()
        assert (await page.locator("#output-text").inner_text()).split() == ["1", "2", "3", "4", "5"]
        selection = await page.evaluate(f"() => window.tetherTerms['{shell}'].getSelection()")
        assert "seq 1 5" in selection
        assert "in the terminal too" in await page.locator("#output-note").inner_text()

        # Copy a command's whole output (y on its row, or its Copy button).
        await seq_row.locator("button", has_text="Copy").click()
        with anyio.fail_after(HANG_S):
            while await clipboard(page) != "1\n2\n3\n4\n5":
                await anyio.sleep(0.05)
        await page.locator("#timeline tbody tr", has_text="exit 3").focus()
        await page.keyboard.press("y")
        with anyio.fail_after(HANG_S):
            while await clipboard(page) != "":  # sh -c 'exit 3' printed nothing
                await anyio.sleep(0.05)
        shot = await screenshot(page, "timeline")
        publish_screenshot(shot)


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_a_timeline_that_cannot_be_read_shows_no_other_shells_rows(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, cols=100, rows=24)
        assert (await run_in(client, shell, "echo listed-$((1+1))"))["exitCode"] == 0
        gone = "dsh-n0ne00"  # a shell id, of no shell: its timeline cannot be read
        await page.goto(f"{served.base}/panel/#/shells/{shell},{gone}")
        await page.click(f'.cell[data-shell="{shell}"] .cell-title')
        await page.click("#act-timeline")
        await page.locator("#timeline tbody tr").filter(has_text="listed-").wait_for()

        await page.click(f'.cell[data-shell="{gone}"] .cell-title')
        await page.wait_for_function(
            "(gone) => document.querySelector('#timeline-note').textContent.includes(gone)", arg=gone
        )
        note = await page.locator("#timeline-note").text_content()
        assert await page.locator("#timeline tbody tr").count() == 0, note
        assert note and note.startswith(f"{gone}: ")
