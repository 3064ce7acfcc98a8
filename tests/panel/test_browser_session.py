"""The session in chromium: signing out forgets it; a server restarted with a new token sends the
open page to the sign-in page instead of leaving it reconnecting."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import chromium, panel_page
from panel_harness import TOKEN, serving_tools

from hang import HANG_MS
from tether.panel.app import login_url
from tether.panel.auth import COOKIE_NAME

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


async def test_sign_out_forgets_the_session(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        await page.locator("#live.ok").wait_for(timeout=HANG_MS)
        # The page is served with Referrer-Policy: no-referrer; a plain form post from it says
        # `Origin: null`, which the server refuses — the button must still sign out.
        async with page.expect_navigation(timeout=HANG_MS):
            await page.get_by_role("button", name="Sign out").click()
        assert page.url == f"{served.base}/panel/login", await page.content()
        assert await page.locator("#login").is_visible()
        assert COOKIE_NAME not in {c["name"] for c in await page.context.cookies()}
        await page.goto(f"{served.base}/panel/")
        assert page.url == f"{served.base}/panel/login"
