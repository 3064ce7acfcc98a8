"""Side by side: four terminals in a 2×2 grid, each live, each with its own typing focus and lock."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page, screenshot, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, agent, browserless, open_shells, run_in, serving_tools

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url
from tether.store.db import Store


def _screen(home: Path, shell: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), "capture-pane", "-p", "-t", f"={shell}:"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.browser
@pytest.mark.timeout(180)
async def test_a_2x2_grid_streams_four_shells_with_their_own_focus_and_locks(tether_home: Path) -> None:
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        browserless(served) as http,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        shells = await open_shells(client, 4, label="grid", cols=80, rows=20)
        # Build the grid from the keyboard: the first shell opens, the others are added (+).
        await page.locator(f'#shells .open-btn[data-shell="{shells[0]}"]').wait_for()
        await page.focus(f'#shells .open-btn[data-shell="{shells[0]}"]')
        await page.keyboard.press("Enter")
        await page.locator(f'.cell[data-shell="{shells[0]}"] .xterm').wait_for()
        for shell in shells[1:]:
            await page.focus(f'#shells .open-btn[data-shell="{shell}"]')
            await page.keyboard.press("+")
        await page.locator("#grid.n4 .cell").nth(3).wait_for()
        assert page.url.endswith("#/shells/" + ",".join(shells))
        for shell in shells:
            await page.locator(f'#shells tr[data-id="{shell}"] .badge.attached').wait_for(timeout=HANG_MS)

        # Four agents' outputs stream at once, each into its own terminal only.
        async with anyio.create_task_group() as tg:
            for i, shell in enumerate(shells):
                tg.start_soon(run_in, client, shell, f"echo live-in-{i}-$((100+{i}))")
        for i, shell in enumerate(shells):
            await wait_terminal_contains(page, f"live-in-{i}-{100 + i}", shell=shell)
        for i, shell in enumerate(shells):
            text = await terminal_text(page, shell)
            assert all(f"live-in-{j}-{100 + j}" not in text for j in range(4) if j != i), text

        # Own typing focus: key 2 types into the second terminal, and only there.
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("2")
        await page.keyboard.type("echo typed-into-two")
        await page.keyboard.press("Enter")
        with anyio.fail_after(HANG_S):
            while "typed-into-two" not in _screen(tether_home, shells[1]):
                await anyio.sleep(0.05)
        assert all("typed-into-two" not in _screen(tether_home, s) for s in (shells[0], shells[2], shells[3]))
        assert await page.locator(f'.cell.focused[data-shell="{shells[1]}"]').count() == 1

        # Own lock: the third terminal's Lock locks that shell only.
        await page.click(f'.cell[data-shell="{shells[2]}"] .cell-lock')
        await page.locator(f'.cell[data-shell="{shells[2]}"] .cell-lock[aria-pressed="true"]').wait_for()
        pressed = [
            await page.locator(f'.cell[data-shell="{s}"] .cell-lock').get_attribute("aria-pressed")
            for s in shells
        ]
        assert pressed == ["false", "false", "true", "false"]
        refused = await run_in(client, shells[2], "echo while-locked")
        assert refused["errorCode"] == "REFUSED" and "locked by panel" in refused["error"]
        assert (await run_in(client, shells[3], "echo four-is-free"))["exitCode"] == 0
        await wait_terminal_contains(page, "four-is-free", shell=shells[3])
        await screenshot(page, "grid-2x2")

        # Detaching one cell (x on the focused one: the third, whose Lock was pressed) leaves three;
        # the others keep streaming.
        assert await page.locator(f'.cell.focused[data-shell="{shells[2]}"]').count() == 1
        await page.keyboard.press("x")
        await page.locator("#grid.n3").wait_for()
        assert shells[2] not in page.url
        assert (await run_in(client, shells[0], "echo still-live"))["exitCode"] == 0
        await wait_terminal_contains(page, "still-live", shell=shells[0])
        unlocked = await http.post(f"/panel/api/shells/{shells[2]}/unlock", json={})
        assert unlocked.status_code == 200


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_a_cell_whose_shell_ended_offers_no_lock(tether_home: Path) -> None:
    """A shell closed while its terminal is shown: its cell's Lock is disabled and says why, the
    `l` key says the same instead of locking the ended shell's record, and nothing throws; the
    other cell's Lock still works."""
    errors: list[str] = []
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        gone, kept = await open_shells(client, 2)
        await page.goto(f"{served.base}/panel/#/shells/{gone},{kept}")
        for shell in (gone, kept):
            await page.locator(f'#shells tr[data-id="{shell}"] .badge.attached').wait_for(timeout=HANG_MS)
        lock = page.locator(f'.cell[data-shell="{gone}"] .cell-lock')
        assert await lock.is_enabled()

        closed = await client.call_tool(
            "shell_manage", {"tasks": [{"target": {"sessions": gone}, "action": {"kind": "close"}}]}
        )
        assert not closed.is_error
        await page.locator(f'.cell.closed[data-shell="{gone}"]').wait_for(timeout=HANG_MS)
        # The list no longer has it (the cells are drawn from the same push): its Lock is off.
        await page.locator(f'#shells tr[data-id="{gone}"]').wait_for(state="detached", timeout=HANG_MS)
        assert await lock.is_disabled()
        reason = await lock.get_attribute("title")
        assert reason and f"shell {gone} is not running" in reason and "nothing to lock" in reason
        await lock.click(force=True)  # a disabled button: the click goes nowhere

        # The shortcut on that cell says why too, and locks nothing.
        await page.click(f'.cell[data-shell="{gone}"] .cell-title')
        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("l")
        toast = page.locator("#toast.error")
        await toast.wait_for()
        assert f"shell {gone} is not running" in await toast.inner_text()
        store = Store.open(tether_home)
        try:
            assert store.query("SELECT shell_id FROM manual_locks") == []
        finally:
            store.close()

        other = page.locator(f'.cell[data-shell="{kept}"] .cell-lock')
        assert await other.is_enabled() and await other.get_attribute("title") is None
        await other.click()
        await page.locator(f'.cell[data-shell="{kept}"] .cell-lock[aria-pressed="true"]').wait_for()
        assert errors == []
