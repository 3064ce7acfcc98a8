"""Search in a terminal's whole history (the exact log, not only the scrollback), with next and
previous and highlighting; copying the terminal's selection to the clipboard."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from browser import chromium, clipboard, panel_page, screenshot, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, agent, open_shells, run_in, serving_tools
from playwright.async_api import Page

from hang import HANG_S
from tether.panel.app import login_url


async def _note(page: Page, text: str) -> None:
    await page.wait_for_function(
        "(text) => document.querySelector('#search-note').textContent.startsWith(text)", arg=text
    )


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_search_finds_a_line_that_left_the_scrollback(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, cols=100, rows=24)
        # Far more than tmux's scrollback (2000 lines) and xterm's (10000) between the two needles.
        command = "printf 'needle-%s\\n' OLD; seq -f 'filler %g' 1 12000; printf 'needle-%s\\n' NEW"
        assert (await run_in(client, shell, command))["exitCode"] == 0
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await wait_terminal_contains(page, "needle-NEW")
        shown = await terminal_text(page, shell)
        assert "needle-OLD" not in shown and "filler 1\n" not in shown  # gone from the terminal

        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("f")
        await page.keyboard.type("needle-OLD")
        await page.keyboard.press("Enter")
        await _note(page, "match 1 of 1 in the whole history")
        current = page.locator("#search-hits li.current")
        assert await current.locator("mark").inner_text() == "needle-OLD"
        assert "filler 1" in await current.inner_text()  # its context line, from the log

        # A regex over both: next and previous move between them, the current one highlighted.
        await page.fill("#search-q", "needle-(OLD|NEW)$")
        await page.check("#search-regex")
        await page.focus("#search-q")
        await page.keyboard.press("Enter")
        await _note(page, "match 1 of 2")
        assert await current.locator("mark").inner_text() == "needle-OLD"
        await page.keyboard.press("Enter")
        await _note(page, "match 2 of 2")
        assert await current.locator("mark").inner_text() == "needle-NEW"
        await page.keyboard.press("Shift+Enter")
        await _note(page, "match 1 of 2")
        await page.click("#search-next")
        await _note(page, "match 2 of 2")
        await screenshot(page, "search")
        # needle-NEW is still in the terminal: it is selected there; copy puts it on the clipboard.
        selection = await page.evaluate(f"() => window.tetherTerms['{shell}'].getSelection()")
        assert selection.startswith("needle-NEW")
        await page.keyboard.press("c")  # the focus is on the Next button: a shortcut, not typing
        with anyio.fail_after(HANG_S):
            while not (await clipboard(page)).startswith("needle-NEW"):
                await anyio.sleep(0.05)

        nothing = "no-such-line-anywhere"
        await page.uncheck("#search-regex")
        await page.fill("#search-q", nothing)
        await page.press("#search-q", "Enter")
        await _note(page, f"no match for {nothing}")
