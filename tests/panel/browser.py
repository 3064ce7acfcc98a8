"""Debian's chromium under Playwright for the panel's browser tests (never a downloaded browser)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import Browser, Page, async_playwright

from hang import HANG_MS

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "panel"
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "panel.png"


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def panel_page(
    browser: Browser, login_url: str, *, width: int = 1280, height: int = 800
) -> AsyncIterator[Page]:
    """A page signed in through the one-time link, as a person would."""
    context = await browser.new_context(viewport={"width": width, "height": height})
    try:
        page = await context.new_page()
        await page.goto(login_url)
        yield page
    finally:
        await context.close()


async def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path))
    return path


def publish_screenshot(path: Path) -> None:
    """Copy a good screenshot to docs/panel.png (committed; shown in docs/panel.md).

    Only when ``TETHER_PUBLISH_SCREENSHOT=1``, so an ordinary test run leaves the tree clean:
    ``TETHER_PUBLISH_SCREENSHOT=1 .venv/bin/pytest tests/panel/test_browser_agent.py`` refreshes it.
    """
    if os.environ.get("TETHER_PUBLISH_SCREENSHOT") == "1":
        DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_SCREENSHOT)


async def terminal_text(page: Page) -> str:
    """Everything in the page's terminal: scrollback and screen, as xterm.js holds it."""
    text: str = await page.evaluate(
        """() => {
            const b = window.tetherTerm.buffer.active; const out = [];
            for (let i = 0; i < b.length; i++) {
                const l = b.getLine(i); if (l) out.push(l.translateToString(true));
            }
            return out.join('\\n');
        }"""
    )
    return text


async def wait_terminal_contains(page: Page, needle: str, timeout_ms: int = HANG_MS) -> None:
    await page.wait_for_function(
        """(needle) => {
            const t = window.tetherTerm; if (!t) return false;
            const b = t.buffer.active;
            for (let i = 0; i < b.length; i++) {
                const l = b.getLine(i);
                if (l && l.translateToString(true).includes(needle)) return true;
            }
            return false;
        }""",
        arg=needle,
        timeout=timeout_ms,
    )
