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
    context = await browser.new_context(
        viewport={"width": width, "height": height},
        permissions=["clipboard-read", "clipboard-write"],
        accept_downloads=True,
    )
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
    ``TETHER_PUBLISH_SCREENSHOT=1 .venv/bin/pytest tests/panel/test_browser_timeline.py`` refreshes it.
    """
    if os.environ.get("TETHER_PUBLISH_SCREENSHOT") == "1":
        DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_SCREENSHOT)


_TERM = "(shell) => shell ? (window.tetherTerms || {})[shell] : window.tetherTerm"


async def terminal_text(page: Page, shell: str | None = None) -> str:
    """Everything in a terminal (the focused one, or ``shell``'s): scrollback and screen."""
    text: str = await page.evaluate(
        f"""(shell) => {{
            const t = ({_TERM})(shell); const b = t.buffer.active; const out = [];
            for (let i = 0; i < b.length; i++) {{
                const l = b.getLine(i); if (l) out.push(l.translateToString(true));
            }}
            return out.join('\\n');
        }}""",
        shell,
    )
    return text


async def wait_terminal_contains(
    page: Page, needle: str, timeout_ms: int = HANG_MS, shell: str | None = None
) -> None:
    await page.wait_for_function(
        f"""([needle, shell]) => {{
            const t = ({_TERM})(shell); if (!t) return false;
            const b = t.buffer.active;
            for (let i = 0; i < b.length; i++) {{
                const l = b.getLine(i);
                if (l && l.translateToString(true).includes(needle)) return true;
            }}
            return false;
        }}""",
        arg=[needle, shell],
        timeout=timeout_ms,
    )


async def clipboard(page: Page) -> str:
    """What the page put on the clipboard (the context is granted clipboard access)."""
    text: str = await page.evaluate("() => navigator.clipboard.readText()")
    return text


async def cell_cursor(page: Page, shell: str) -> tuple[int, int, int, int]:
    """(x, y, cols, rows) of a terminal's cursor on its screen, as xterm.js holds it."""
    got = await page.evaluate(
        "(shell) => { const t = window.tetherTerms[shell]; const b = t.buffer.active; "
        "return [b.cursorX, b.cursorY, t.cols, t.rows]; }",
        shell,
    )
    return (int(got[0]), int(got[1]), int(got[2]), int(got[3]))
