"""What the page says when an action fails: in words a person can act on, inside the window."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from browser import chromium, panel_page
from panel_harness import TOKEN, agent, free_port, open_shells, serving_tools

from hang import HANG_MS
from tether.panel.app import login_url


@pytest.mark.browser
async def test_an_action_while_the_server_is_down_says_so_in_words(tether_home: Path) -> None:
    """An action taken while the server is stopped under an open page: the toast says the server
    gave no answer and what to do (it said the browser's own "Failed to fetch")."""
    port = free_port()
    async with chromium() as browser, AsyncExitStack() as pages:
        async with serving_tools(tether_home, port=port) as served:
            async with agent(served) as client:
                (shell,) = await open_shells(client)
            page = await pages.enter_async_context(panel_page(browser, login_url(served.base, TOKEN)))
            await page.goto(f"{served.base}/panel/#/shells/{shell}")
            await page.locator(f'.cell[data-shell="{shell}"] .cell-note', has_text="attached:").wait_for()

        await page.locator("#live.down").wait_for(timeout=HANG_MS)
        await page.locator("#act-snapshot").click()
        toast = page.locator("#toast.error:not([hidden])", has_text="Snapshot:")
        await toast.wait_for(timeout=HANG_MS)
        text = await toast.inner_text()
        assert "no answer from the panel's server" in text, text
        assert "Failed to fetch" not in text, text
        await page.close()  # no reconnecting page left behind


@pytest.mark.browser
async def test_a_long_error_stays_inside_the_window(tether_home: Path) -> None:
    """An error quoting a long input whole (a 3,000-character directory that does not exist)
    wraps inside the toast, which stays inside the window (it ran off the right edge)."""
    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        await page.locator("#live", has_text="live").wait_for()
        await page.locator("#new-shell-box summary").click()
        await page.locator('#new-shell input[name="cwd"]').fill("/no-such-" + "d" * 3000)
        await page.locator('#new-shell input[name="label"]').press("Enter")
        toast = page.locator("#toast.error:not([hidden])", has_text="is not a directory")
        await toast.wait_for(timeout=HANG_MS)
        box = await toast.bounding_box()
        assert box is not None
        width, height = page.viewport_size["width"], page.viewport_size["height"]  # type: ignore[index]
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, box
        # Its text is inside it too (not run on past its right edge and out of the window).
        widths = await toast.evaluate("(t) => [t.scrollWidth, t.clientWidth]")
        assert widths[0] <= widths[1], widths
