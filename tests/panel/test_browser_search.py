"""Search in a terminal's whole history (the exact log, not only the scrollback), with next and
previous and highlighting; copying the terminal's selection to the clipboard."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from browser import chromium, clipboard, panel_page, screenshot, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, agent, browserless, open_shells, run_in, serving_tools
from playwright.async_api import Page

from hang import HANG_MS, HANG_S
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


NOTES = """() => { window.searchNotes = [];
    new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes)
        window.searchNotes.push(n.textContent); }).observe(document.querySelector('#search-note'),
        { childList: true }); }"""


async def _notes_after(page: Page, action: str, count: int) -> list[str]:
    """What the search note said after ``action`` (a script), once it has said ``count`` things
    besides "searching…"."""
    await page.evaluate("() => { window.searchNotes.length = 0; }")
    await page.evaluate(action)
    await page.wait_for_function(
        "(count) => window.searchNotes.filter((n) => n !== 'searching…').length >= count",
        arg=count,
        timeout=HANG_MS,
    )
    notes: list[str] = await page.evaluate("() => window.searchNotes")
    return notes


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_steps_taken_while_a_search_loads_wait_for_it(tether_home: Path) -> None:
    """Two steps at once: a new query's first answer is not "no match" while it loads, and two Next
    at the end of a page load the next page once (its matches were listed twice)."""
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, cols=100, rows=24)
        assert (await run_in(client, shell, "seq -f 'hit-%g' 1 250"))["exitCode"] == 0
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await wait_terminal_contains(page, "hit-250")
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("f")
        await page.keyboard.type("hit-")
        await page.evaluate(NOTES)

        submit_twice = "() => { const f = document.querySelector('#search-form'); f.requestSubmit(); "
        submit_twice += "f.requestSubmit(); }"
        notes = await _notes_after(page, submit_twice, 2)
        assert notes[0] == "searching…", notes
        assert not any(n.startswith("no match") for n in notes), notes
        total = int(notes[-1].split(" of ")[1].split(" ")[0])
        assert total > 250  # more than a page (200): the lines, and the command that printed them
        assert [n.split(" in ")[0] for n in notes[1:]] == [f"match 1 of {total}", f"match 2 of {total}"]

        # Back past the first match: the last one loaded (the first page's end); then Next twice.
        await page.click("#search-prev")
        await page.click("#search-prev")
        await _note(page, f"match 200 of {total}")
        next_twice = "() => { const b = document.querySelector('#search-next'); b.click(); b.click(); }"
        notes = await _notes_after(page, next_twice, 2)
        assert [n.split(" in ")[0] for n in notes] == [f"match 201 of {total}", f"match 202 of {total}"]
        assert await page.locator("#search-hits li").count() == total


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_searching_a_closed_shell_says_what_happened_and_where_its_output_is(tether_home: Path) -> None:
    """Search reads a running shell (``shell_read``); on a shell closed meanwhile the note says so
    in the panel's words (not the agent's ``tasks[0].target.sessions … shell_state``) and names what
    still holds its output: the Timeline and the Recording. The API keeps the stable code."""
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        browserless(served) as http,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client)
        assert (await run_in(client, shell, "echo find-me-$((6*7))"))["exitCode"] == 0
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await wait_terminal_contains(page, "find-me-42")
        closed = await client.call_tool(
            "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert not closed.is_error
        await page.locator(f'.cell.closed[data-shell="{shell}"]').wait_for(timeout=HANG_MS)

        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("f")
        await page.keyboard.type("find-me")
        await page.keyboard.press("Enter")
        await page.wait_for_function(
            "() => !['', 'searching…'].includes(document.querySelector('#search-note').textContent)"
        )
        note = await page.locator("#search-note").inner_text()
        assert note.startswith(f"shell {shell} is not running (closed, or never opened)"), note
        assert "Timeline" in note and "Recording" in note, note
        assert not any(word in note for word in ("tasks[0]", "shell_state", "shell_open")), note

        answer = await http.post(f"/panel/api/shells/{shell}/search", json={"pattern": "find-me"})
        assert answer.status_code == 404 and answer.json() == {"error": "NOT_FOUND", "message": note}
