"""Every action without a mouse: the ? overlay lists the shortcuts, and a person drives the panel
with the keyboard alone — filter, open, type, leave, lock, timeline, search, views."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page, screenshot, wait_terminal_contains
from panel_harness import TOKEN, agent, browserless, open_shells, run_in, serving_tools
from playwright.async_api import Page

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url


async def _active(page: Page) -> str:
    found: str = await page.evaluate(
        "() => { const a = document.activeElement; return a.id || a.dataset.shell || a.className; }"
    )
    return found


@pytest.mark.browser
@pytest.mark.timeout(150)
async def test_the_panel_without_a_mouse(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        shell, other = await open_shells(client, 2, cols=90, rows=20)
        assert (await run_in(client, shell, "echo from-the-agent"))["exitCode"] == 0
        await page.locator(f'#shells tr[data-id="{other}"]').wait_for()

        await page.keyboard.press("?")
        help_text = await page.locator("#help-dialog[open]").inner_text()
        for action in (
            "filter the shell list",
            "lock or unlock",
            "command timeline",
            "search the focused",
            "copy the terminal",
            "recordings",
            "add the shell",
            "type into terminal 2",
            "go to the audit log",
            "show this list",
        ):
            assert action in help_text, help_text
        await screenshot(page, "keyboard-help")
        await page.keyboard.press("Escape")
        await page.locator("#help-dialog[open]").wait_for(state="detached")

        # Filter the list to one shell, move to it, open it, type into it, leave it.
        await page.keyboard.press("/")
        assert await _active(page) == "f-text"
        await page.keyboard.type(shell)
        await page.keyboard.press("Escape")
        await page.keyboard.press("j")
        assert await _active(page) == shell
        await page.keyboard.press("Enter")
        await wait_terminal_contains(page, "from-the-agent", shell=shell)
        await page.wait_for_function(
            "() => document.activeElement.classList.contains('xterm-helper-textarea')"
        )
        await page.keyboard.type("echo by-keyboard")
        await page.keyboard.press("Enter")
        await wait_terminal_contains(page, "by-keyboard", shell=shell)
        await page.keyboard.press("Control+BracketRight")
        assert await _active(page) == shell  # back on its row in the list

        # Lock (l) and unlock it again.
        await page.keyboard.press("l")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-lock[aria-pressed="true"]').wait_for()
        await page.keyboard.press("l")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-lock[aria-pressed="false"]').wait_for()

        # The timeline (t), its commands reachable with arrows and Enter; then search (f).
        await page.keyboard.press("t")
        row = page.locator("#timeline tbody tr").first
        await row.wait_for()
        with anyio.fail_after(HANG_S):  # the person's command arrives with the next push of the list
            while "by-keyboard" not in await row.inner_text():
                await anyio.sleep(0.05)
        await row.focus()
        await page.keyboard.press("ArrowDown")
        assert "from-the-agent" in await page.evaluate("() => document.activeElement.textContent")
        await page.keyboard.press("Enter")
        await page.locator("#output-view:not([hidden])").wait_for()
        await page.keyboard.press("Escape")  # leaves the drawer for the terminal
        await page.locator("#drawer").wait_for(state="hidden")
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("f")
        assert await _active(page) == "search-q"
        await page.keyboard.type("by-keyboard")
        await page.keyboard.press("Enter")
        await page.wait_for_function(
            "() => document.querySelector('#search-note').textContent.startsWith('match 1')"
        )

        # Add the other shell to the grid (+ on its row) and switch terminals by number.
        await page.keyboard.press("Escape")
        await page.keyboard.press("/")
        await page.keyboard.press("Control+A")
        await page.keyboard.press("Backspace")
        await page.keyboard.press("Escape")
        for _ in range(2):  # the list is in id order: the other shell is first or second
            await page.keyboard.press("j")
            if await _active(page) == other:
                break
        assert await _active(page) == other
        await page.keyboard.press("+")
        await page.locator("#grid.n2").wait_for()
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("1")
        await page.locator(f'.cell.focused[data-shell="{shell}"]').wait_for()
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("2")
        await page.locator(f'.cell.focused[data-shell="{other}"]').wait_for()

        # Views: g a (audit), g v (vault), g s (back to the shells, the grid as it was).
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("g")
        await page.keyboard.press("a")
        await page.locator("#view-audit:not([hidden])").wait_for()
        await page.keyboard.press("g")
        await page.keyboard.press("v")
        await page.locator("#view-vault:not([hidden])").wait_for()
        await page.keyboard.press("g")
        await page.keyboard.press("s")
        await page.locator("#grid.n2").wait_for()


@pytest.mark.browser
async def test_an_address_with_a_malformed_shell_id_is_refused_in_its_cell(tether_home: Path) -> None:
    """``#/shells/%`` (not valid percent-encoding) and an id with a quote are shown as invalid ids,
    in their cells, like any other; Ctrl+] leaves such a terminal. Nothing throws in the page."""
    errors: list[str] = []
    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        for fragment, shown in (("%", "%"), ("a%22b", 'a"b')):
            await page.evaluate("(hash) => { location.hash = hash; }", f"#/shells/{fragment}")
            # Either the page throws, or the cell tells why it holds no terminal.
            refused = f"shell id {shown!r} is not valid"
            with anyio.fail_after(HANG_S):
                while not errors and refused not in "".join(
                    await page.locator(".cell-note").all_inner_texts()
                ):
                    await anyio.sleep(0.05)
            assert errors == []
            await page.locator(".cell .cell-term").click()
            await page.keyboard.press("Control+BracketRight")
            assert errors == []
            assert await page.evaluate("() => document.activeElement.className") == "cell-title"


SETTLED = """(id) => [...document.querySelectorAll('.cell.closed')].some((c) => c.dataset.shell === id
    && !/attaching…|reconnecting…/.test(c.querySelector('.cell-note').textContent))"""


@pytest.mark.browser
@pytest.mark.timeout(150)
async def test_deep_links_round_trip_any_id_and_refuse_what_is_no_shell(tether_home: Path) -> None:
    """Shell ids are ``dsh-`` and six base-36 characters, so no real one needs encoding; the address
    still round-trips any text — each id percent-encoded on its own, the list split at its commas
    before decoding. An id with ``/``, ``?``, ``#`` or ``,`` (no shell has one) reaches the server
    whole and is refused there, in its cell, with the stable code of a bad id; the page's own
    address for the grid keeps it whole; nothing throws."""
    errors: list[str] = []
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        browserless(served) as http,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        (shell,) = await open_shells(client)
        encoded = shell.replace("-", "%2D")  # the same shell
        await page.goto(f"{served.base}/panel/#/shells/{encoded}")
        await page.locator(f'#shells tr[data-id="{shell}"] .badge.attached').wait_for(timeout=HANG_MS)

        cases = [
            ("a%2Fb", "a/b", "shell id 'a/b' is not valid"),
            ("%2F", "/", "shell id '/' is not valid"),
            ("a%3Fb%23c", "a?b#c", "shell id 'a?b#c' is not valid"),
            ("a%2Cb", "a,b", "shell id 'a,b' is not valid"),
            ("dsh-zzzzzz", "dsh-zzzzzz", "shell dsh-zzzzzz is not running"),
        ]
        for fragment, text, said in cases:
            address = f"#/shells/{shell},{fragment}"
            await page.evaluate("(hash) => { location.hash = hash; }", address)
            # The cell settles: closed, and no longer attaching or about to try again.
            await page.wait_for_function(SETTLED, arg=text, timeout=HANG_MS)
            note = await page.locator(f'.cell[data-shell="{text}"] .cell-note').inner_text()
            assert said in note and errors == []
            assert await page.locator(".cell").count() == 2, text  # the shell, and this one id
            # The page writes the address of its grid itself (g a, g s): the id comes back whole.
            await page.click(f'.cell[data-shell="{shell}"] .cell-title')
            await page.keyboard.press("Control+BracketRight")
            for key in ("g", "a", "g", "s"):
                await page.keyboard.press(key)
            await page.wait_for_function("(hash) => location.hash === hash", arg=address)
            assert await page.locator(f'.cell[data-shell="{text}"]').count() == 1
            assert await page.locator(".cell").count() == 2

        # The same answer from the API, whatever the id holds: the stable code of a bad id.
        for path in ("a%2Fb/timeline", "a%3Fb%23c/timeline", "%2F/lock"):
            url = f"/panel/api/shells/{path}"
            answer = await (http.get(url) if path.endswith("timeline") else http.post(url, json={}))
            assert answer.status_code == 400, (path, answer.text)
            assert answer.json()["error"] == "INVALID_ARGUMENT" and "is not valid" in answer.json()["message"]
        assert errors == []


@pytest.mark.browser
@pytest.mark.timeout(150)
async def test_enter_activates_the_focused_button_or_link(tether_home: Path) -> None:
    """Enter on a focused button, link or summary does what a click does (the page's own Enter
    shortcut took the key first, so Tab to a button and Enter did nothing)."""
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, 1, cols=90, rows=20)
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-note', has_text="attached:").wait_for()

        await page.locator("#act-snapshot").focus()
        await page.keyboard.press("Enter")
        await page.locator("#toast:not([hidden])", has_text=f"snapshot {shell}").wait_for()

        await page.locator(f'.cell[data-shell="{shell}"] .cell-lock').focus()
        await page.keyboard.press("Enter")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-lock[aria-pressed="true"]').wait_for()

        await page.locator("#new-shell-box summary").focus()
        await page.keyboard.press("Enter")
        await page.locator("#new-shell-box[open]").wait_for()

        await page.locator('.top nav a[data-view="audit"]').focus()
        await page.keyboard.press("Enter")
        await page.wait_for_function("() => location.hash === '#/audit'", timeout=HANG_MS)

        # The list's open button still opens its shell with Enter (now by its own click).
        await page.goto(f"{served.base}/panel/#/shells")
        await page.locator(f'#shells .open-btn[data-shell="{shell}"]').focus()
        await page.keyboard.press("Enter")
        await page.locator(f'.cell[data-shell="{shell}"] .cell-note', has_text="attached:").wait_for()
