"""The live shell list under a person's mouse while agents keep it changing."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import chromium, panel_page
from panel_harness import TOKEN, agent, open_shells, run_in, serving_tools

from hang import HANG_MS
from tether.panel.app import login_url


@pytest.mark.browser
async def test_a_click_on_the_list_survives_a_push(tether_home: Path) -> None:
    """A push of the list (every second while an agent's shell prints) lands between a person's
    mousedown and mouseup on a shell's button: the click still opens the shell. (Every push rebuilt
    every row, so the pressed button was replaced and the click was lost.)"""
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        watched, busy = await open_shells(client, 2, cols=90, rows=20)
        button = page.locator(f'#shells .open-btn[data-shell="{watched}"]')
        await button.wait_for()
        box = await button.bounding_box()
        assert box is not None
        await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await page.mouse.down()
        # Another shell's last command changes: the list is pushed and drawn while the button is held.
        assert (await run_in(client, busy, "echo pushed-while-pressed"))["exitCode"] == 0
        await page.locator(f'#shells tr[data-id="{busy}"]', has_text="pushed-while-pressed").wait_for(
            timeout=HANG_MS
        )
        await page.mouse.up()
        await page.locator(f'.cell[data-shell="{watched}"] .cell-note', has_text="attached:").wait_for(
            timeout=HANG_MS
        )
