"""Layout in chromium at 1280×800 and at 420 px: no clipped column, the sign-in form in one column,
``/`` leading to the panel (or its sign-in); at 1000, 700 and 480 px every column of the list and of
the timeline in view. Screenshots land in test-artifacts/panel/."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from browser import ARGS, CHROMIUM, chromium, panel_page, screenshot, wait_terminal_contains
from panel_harness import TOKEN, agent, browserless, open_shells, run_in, serving, serving_tools
from playwright.async_api import Page

from hang import HANG_MS
from tether.panel.app import login_url
from tether.store.db import Store

# Every header and cell of the shell list fits its column (text that is cut on purpose — a long
# command or cwd — ends in an ellipsis inside its own block and does not overflow the cell), the
# table fits its pane, and the page never scrolls sideways.
LAYOUT_PROBLEMS = """() => {
    const problems = [];
    const pane = document.querySelector('#list-pane').getBoundingClientRect();
    const table = document.querySelector('#shells').getBoundingClientRect();
    if (table.right > pane.right + 1) problems.push(`table ends at ${table.right}, pane at ${pane.right}`);
    for (const cell of document.querySelectorAll('#shells th, #shells td')) {
        if (cell.offsetParent === null) continue;  // a column hidden at this width
        const what = `${cell.tagName} "${cell.textContent.trim().slice(0, 30)}"`;
        if (cell.scrollWidth > cell.clientWidth + 1)
            problems.push(`${what} needs ${cell.scrollWidth}px, has ${cell.clientWidth}px`);
        if (cell.getBoundingClientRect().right > pane.right + 1) problems.push(`${what} ends outside`);
    }
    const wide = document.documentElement.scrollWidth;
    if (wide > innerWidth + 1) problems.push(`the page is ${wide}px wide in a ${innerWidth}px window`);
    return problems;
}"""


async def _layout_problems(page: Page) -> list[str]:
    found: list[str] = await page.evaluate(LAYOUT_PROBLEMS)
    return found


async def _open(client: Any, **action: Any) -> str:
    result = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", **action}}]})
    shell: str = (result.structured_content or {})["tasks"][0]["shell"]
    return shell


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_no_column_is_clipped_at_1280_or_420(tether_home: Path) -> None:
    deep = tether_home / "work" / "a-rather-long-directory-name" / "and-another-one-below-it"
    deep.mkdir(parents=True)
    async with serving_tools(tether_home) as served, agent(served) as client, browserless(served) as http:
        first = await _open(client, label="x" * 32, cwd=str(deep))
        second = await _open(client, label="tests")
        third = await _open(client)
        await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": second},
                        "action": {"kind": "run", "command": "sleep 600 # " + "a long command " * 6},
                        "wait": {"kind": "none"},
                    }
                ]
            },
        )
        locked = await http.post(f"/panel/api/shells/{third}/lock", json={"reason": "deploying"})
        assert locked.status_code == 200
        # The widest idle time the list shows ("23h 59m"): the column the old layout clipped.
        store = Store.open(tether_home)
        try:
            ago = int(time.time() * 1000) - (23 * 3600 + 59 * 60 + 30) * 1000
            store.execute("UPDATE shells SET last_activity_ms = ? WHERE id = ?", (ago, first))
        finally:
            store.close()
        async with chromium() as browser, panel_page(browser, login_url(served.base, TOKEN)) as page:
            await page.goto(f"{served.base}/panel/#/shells/{first}")
            await wait_terminal_contains(page, "#", shell=first)
            idle = page.locator(f'#shells td.idle[data-id="{first}"]')
            await page.wait_for_function(
                "(id) => document.querySelector(`#shells td.idle[data-id='${id}']`)"
                "?.textContent === '23h 59m'",
                arg=first,
            )
            await page.locator(f'#shells tr[data-id="{third}"] .badge.locked').first.wait_for()
            assert await _layout_problems(page) == []
            assert await idle.is_visible()
            await screenshot(page, "layout-1280x800")

            await page.set_viewport_size({"width": 420, "height": 800})
            await page.wait_for_function("() => innerWidth === 420")
            assert await _layout_problems(page) == []
            assert await idle.is_visible() and await idle.inner_text() == "23h 59m"
            await screenshot(page, "layout-420")
            await page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
            await page.locator(".shells-view").evaluate("(v) => v.scrollTo(0, v.scrollHeight)")
            await screenshot(page, "layout-420-terminal")


# Every cell of the timeline lies inside its drawer (none pushed out of view to the right), the
# timeline does not scroll sideways, and no cell with content is squeezed to nothing: when, took,
# exit, by, the command and its buttons can all be seen.
TIMELINE_PROBLEMS = """() => {
    const problems = [];
    const drawer = document.querySelector('#drawer').getBoundingClientRect();
    const scroller = document.querySelector('#panel-timeline .scroll');
    if (scroller.scrollWidth > scroller.clientWidth + 1)
        problems.push(`it scrolls sideways: ${scroller.scrollWidth}px in ${scroller.clientWidth}px`);
    for (const cell of document.querySelectorAll('#timeline th, #timeline td')) {
        const box = cell.getBoundingClientRect();
        const what = `${cell.tagName} "${cell.textContent.trim().slice(0, 30)}"`;
        if (box.left < drawer.left - 1 || box.right > drawer.right + 1)
            problems.push(`${what} at ${box.left}..${box.right}, drawer ${drawer.left}..${drawer.right}`);
        if (cell.tagName === 'TD' && cell.clientWidth < 40)
            problems.push(`${what} is ${cell.clientWidth}px wide`);
    }
    return problems;
}"""


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_every_column_stays_reachable_in_a_narrow_window(tether_home: Path) -> None:
    """At 700 and 480 px (and at 1000, where the terminals' column is narrow): the list keeps every
    column — its command and cwd on a line of their own — and the timeline keeps every column in
    view, each command on a line under its time, exit and author."""
    async with serving_tools(tether_home) as served, agent(served) as client:
        first = await _open(client, label="x" * 32)
        second = await _open(client, label="tests")
        await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": second},
                        "action": {"kind": "run", "command": "sleep 600 # " + "a long command " * 6},
                        "wait": {"kind": "none"},
                    }
                ]
            },
        )
        assert (await run_in(client, first, "echo reachable-$((6*7))"))["exitCode"] == 0
        async with chromium() as browser, panel_page(browser, login_url(served.base, TOKEN)) as page:
            await page.goto(f"{served.base}/panel/#/shells/{first}")
            await wait_terminal_contains(page, "reachable-42", shell=first)
            await page.click("#act-timeline")
            await page.locator("#timeline tbody tr").first.wait_for()
            command = page.locator(f'#shells tr[data-id="{second}"] td:nth-child(4)')
            for width in (1000, 700, 480):
                await page.set_viewport_size({"width": width, "height": 800})
                await page.wait_for_function(f"() => innerWidth === {width}")
                assert await _layout_problems(page) == [], width
                assert await command.is_visible(), width
                assert "sleep 600" in await command.inner_text()
                assert await page.evaluate(TIMELINE_PROBLEMS) == [], width
                await page.locator("#drawer").scroll_into_view_if_needed()
                await screenshot(page, f"layout-{width}-timeline")


async def _column_problems(page: Page) -> list[str]:
    """The sign-in page's heading, help text and form, one under the other, each as wide as the
    card (the old layout put them in three columns side by side)."""
    found: list[str] = await page.evaluate(
        """() => {
            const parts = ['#login h1', '#login > p', '#login form'].map((s) => document.querySelector(s));
            const card = document.querySelector('#login').getBoundingClientRect();
            const problems = [];
            let bottom = -Infinity;
            for (const p of parts) {
                const box = p.getBoundingClientRect();
                const name = p.tagName;
                if (box.top < bottom - 1) problems.push(`${name} starts above the end of the one before`);
                if (box.width < card.width * 0.7) problems.push(`${name}: ${box.width}px of ${card.width}px`);
                bottom = box.bottom;
            }
            if (document.documentElement.scrollWidth > innerWidth + 1) problems.push('it scrolls sideways');
            return problems;
        }"""
    )
    return found


@pytest.mark.browser
async def test_sign_in_is_one_column_and_the_root_leads_to_the_panel(tether_home: Path) -> None:
    async with serving(tether_home) as served:
        async with browserless(served, signed_in=False) as http:
            root = await http.get("/")
            assert root.status_code == 307 and root.headers["location"] == "/panel/"
        async with chromium() as browser:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            try:
                page = await context.new_page()
                await page.goto(f"{served.base}/")  # not signed in: / → /panel/ → the sign-in page
                assert page.url == f"{served.base}/panel/login"
                assert await _column_problems(page) == []
                await screenshot(page, "login-1280x800")
                await page.set_viewport_size({"width": 420, "height": 800})
                assert await _column_problems(page) == []
                await screenshot(page, "login-420")
                # The form works in a real browser (it posts with Origin: null: the page is no-referrer).
                await page.fill('input[name="token"]', TOKEN)
                async with page.expect_navigation():
                    await page.keyboard.press("Enter")
                await page.wait_for_function("() => location.hash === '#/shells'")
                assert page.url == f"{served.base}/panel/#/shells", page.url
                await page.goto(f"{served.base}/")  # signed in: / is the panel itself
                await page.wait_for_function("() => location.hash === '#/shells'")
                assert page.url == f"{served.base}/panel/#/shells", page.url
            finally:
                await context.close()


assert CHROMIUM and ARGS  # the harness's browser (Debian's chromium), never a downloaded one


@pytest.mark.browser
async def test_a_terminal_opened_from_the_list_in_a_phone_window_comes_into_view(tether_home: Path) -> None:
    """In a phone-sized window the list comes first and the terminal below it: a shell opened from
    the keyboard (``j``, Enter) took the keys in a terminal out of sight, below eight rows of list.
    The terminal it opens is now scrolled into view."""
    async with serving_tools(tether_home) as served, agent(served) as client:
        shells = await open_shells(client, 8)
        async with (
            chromium() as browser,
            panel_page(browser, login_url(served.base, TOKEN), width=390, height=844) as page,
        ):
            await page.goto(f"{served.base}/panel/#/shells")
            await page.locator("#shells tbody tr").nth(len(shells) - 1).wait_for(timeout=HANG_MS)
            await page.keyboard.press("j")
            await page.keyboard.press("Enter")
            cell = page.locator(".cell")
            await cell.locator(".cell-note", has_text="attached:").wait_for(timeout=HANG_MS)
            assert await page.evaluate("() => !!document.activeElement.closest('.cell')")  # it has the keys
            top, bottom = await cell.evaluate(
                "(c) => { const r = c.getBoundingClientRect(); return [r.top, r.bottom]; }"
            )
            assert 0 <= top < 844 and bottom > 0, (top, bottom)  # and it is in sight
