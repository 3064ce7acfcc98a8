"""The vault view is live: what ``tether vault`` (another process) adds, removes, unlocks shows in an
open page without a reload — names and lock state only, never a value, and never at the cost of a
passphrase a person is typing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page, screenshot
from panel_harness import TOKEN, serving_tools
from playwright.async_api import Page, WebSocket

from hang import HANG_MS
from tether.config import load_config
from tether.panel.app import login_url
from tether.store.vault import Vault

PASSPHRASE = "tidy lemon forty"
FIRST = "first-canary-Zq81"
ADDED = "added-canary-Wx42"
LISTED = """(name) => [...document.querySelectorAll('#vault-items li')]
    .some((li) => li.firstChild.textContent === name)"""


async def _vault_cli(home: Path, *args: str, stdin: str = "") -> str:
    """``python -m tether vault ARGS``: a process of its own, as a person at a terminal runs it."""
    done = await anyio.run_process(
        [sys.executable, "-m", "tether", "vault", *args],
        input=stdin.encode(),
        env={**os.environ, "TETHER_HOME": str(home)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def _names(page: Page) -> list[str]:
    found: list[str] = await page.evaluate(
        "() => [...document.querySelectorAll('#vault-items li')].map((li) => li.firstChild.textContent)"
    )
    return found


@pytest.mark.browser
async def test_the_vault_view_follows_changes_made_elsewhere(tether_home: Path) -> None:
    vault = Vault.open(load_config(tether_home))
    try:
        vault.create_group("ops", PASSPHRASE)
        vault.set("FIRST_KEY", FIRST)
    finally:
        vault.store.close()
    frames: list[str] = []

    def watch(ws: WebSocket) -> None:
        ws.on("framereceived", lambda payload: frames.append(str(payload)))

    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        page.on("websocket", watch)
        await page.goto(f"{served.base}/panel/#/vault")
        await page.wait_for_function("() => document.querySelector('#vault-items li')")
        assert await _names(page) == ["FIRST_KEY"]

        # A person starts typing the passphrase of the locked group…
        passphrase = page.locator('form[aria-label="Unlock group ops"] input[name="passphrase"]')
        await passphrase.fill("half-typed")
        await passphrase.focus()

        # …while a secret is added from the command line: it shows, and the typing is untouched.
        await _vault_cli(tether_home, "set", "ADDED_KEY", stdin=ADDED + "\n")
        await page.wait_for_function(LISTED, arg="ADDED_KEY", timeout=HANG_MS)
        assert await passphrase.input_value() == "half-typed"
        assert await passphrase.evaluate("(input) => input === document.activeElement")
        default_row = page.locator("#vault-groups tbody tr", has_text="default")
        assert (await default_row.locator("td").nth(1).inner_text()) == "2"

        # Removed, and a group unlocked, elsewhere: both show.
        await _vault_cli(tether_home, "rm", "FIRST_KEY")
        await page.wait_for_function(f"(name) => !({LISTED})(name)", arg="FIRST_KEY", timeout=HANG_MS)
        assert await _names(page) == ["ADDED_KEY"]
        await _vault_cli(tether_home, "unlock", "ops", stdin=PASSPHRASE + "\n")
        ops = page.locator("#vault-groups tbody tr", has_text="ops")
        await ops.locator("text=unlocked until").wait_for(timeout=HANG_MS)
        await ops.locator("button", has_text="Lock now").wait_for()
        await screenshot(page, "vault-live")

        # Names only: no value reached the page, by any socket or in the document.
        html = await page.content()
        assert frames and all(FIRST not in f and ADDED not in f for f in frames)
        assert FIRST not in html and ADDED not in html


@pytest.mark.browser
async def test_the_unlock_form_offers_the_lengths_config_allows(tether_home: Path) -> None:
    """The form's default and largest number of minutes are ``[vault]`` of config.toml, so a person
    is not offered 480 minutes that the server then refuses (nor kept from a longer one allowed)."""
    (tether_home / "config.toml").write_text("[vault]\nunlock_minutes = 30\nmax_unlock_minutes = 45\n")
    vault = Vault.open(load_config(tether_home))
    try:
        vault.create_group("ops", PASSPHRASE)
    finally:
        vault.store.close()
    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        await page.goto(f"{served.base}/panel/#/vault")
        minutes = page.locator('form[aria-label="Unlock group ops"] input[name="minutes"]')
        await minutes.wait_for(timeout=HANG_MS)
        assert await minutes.input_value() == "30"
        assert await minutes.get_attribute("max") == "45"
        # The browser itself keeps a person inside the allowed range: 46 does not submit.
        await page.locator('form[aria-label="Unlock group ops"] input[name="passphrase"]').fill(PASSPHRASE)
        await minutes.fill("46")
        assert not await minutes.evaluate("(input) => input.checkValidity()")
        await minutes.fill("45")
        await page.locator('form[aria-label="Unlock group ops"] button[type="submit"]').click()
        ops = page.locator("#vault-groups tbody tr", has_text="ops")
        await ops.locator("text=unlocked until").wait_for(timeout=HANG_MS)
