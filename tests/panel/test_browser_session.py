"""The session in chromium: signing out forgets it; a server restarted with a new token sends the
open page to the sign-in page instead of leaving it reconnecting."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page
from panel_harness import TOKEN, free_port, serving_tools

from hang import HANG_MS, HANG_S
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


async def test_a_restart_with_a_new_token_sends_the_open_page_to_sign_in(tether_home: Path) -> None:
    """The events socket of a page whose cookie the restarted server no longer accepts is refused
    before it is accepted (HTTP 403: the page sees a bare 1006, as for a server that is down). The
    page asks the API, hears 401, and opens the sign-in page instead of reconnecting for ever."""
    port = free_port()  # the restarted server must be where the page expects it
    attempts: list[str] = []
    async with chromium() as browser, AsyncExitStack() as pages:
        async with serving_tools(tether_home, port=port) as served:
            page = await pages.enter_async_context(panel_page(browser, login_url(served.base, TOKEN)))
            page.on("websocket", lambda ws: attempts.append(ws.url))
            await page.locator("#live.ok").wait_for(timeout=HANG_MS)
        await page.locator("#live.down").wait_for(timeout=HANG_MS)
        async with serving_tools(tether_home, token=TOKEN + "-rotated", port=port) as served:
            # Either the page gives up on the socket, or it keeps trying the new server (a second
            # attempt follows a refused one only when the page did not see it was signed out).
            # Four, not two: on a loaded machine the browser reports an attempt made while no
            # server was up (refused, then asked the API, which was down too) after this count
            # was taken, and one at the new server then goes on to sign-in as it should.
            before = len(attempts)
            with anyio.fail_after(HANG_S):
                while not page.url.endswith("/panel/login") and len(attempts) < before + 4:
                    await anyio.sleep(0.05)
            assert page.url == f"{served.base}/panel/login", (page.url, attempts[before:])
            await page.locator("#login").wait_for(timeout=HANG_MS)
