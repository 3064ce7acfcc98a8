"""The page's terminal in a real browser against a real tmux shell (no agent tools involved)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page, screenshot, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, serving

from hang import HANG_S
from tether.config import load_config
from tether.panel import tmux_client
from tether.panel.app import login_url
from tether.shells import LocalHost

SHELL = "dsh-br0wse"


def _tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.browser
async def test_terminal_shows_scrollback_streams_output_and_takes_typing(tether_home: Path) -> None:
    _tmux(
        tether_home,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        SHELL,
        "-x",
        "100",
        "-y",
        "20",
        "bash --norc",
    )
    _tmux(tether_home, "send-keys", "-t", f"={SHELL}:", "seq -f 'old-line-%g' 1 60", "Enter")
    with anyio.fail_after(HANG_S):
        while "old-line-60" not in _tmux(tether_home, "capture-pane", "-p", "-t", f"={SHELL}:"):
            await anyio.sleep(0.02)

    async with (
        serving(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        assert page.url.endswith("/panel/#/shells")  # signed in, token gone from the address
        await page.goto(f"{served.base}/panel/#/shells/{SHELL}")
        await wait_terminal_contains(page, "old-line-60")
        # Lines that scrolled off tmux's screen before the page attached are in xterm's scrollback.
        await wait_terminal_contains(page, "old-line-1")
        sock = LocalHost(load_config(tether_home))
        assert await tmux_client.terminal_clients(sock, SHELL) == 1

        _tmux(tether_home, "send-keys", "-t", f"={SHELL}:", "echo streamed-$((40+2))", "Enter")
        await wait_terminal_contains(page, "streamed-42")

        await page.click("#terminal")
        await page.keyboard.type("echo typed-$((6*7))")
        await page.keyboard.press("Enter")
        with anyio.fail_after(HANG_S):
            while "typed-42" not in _tmux(tether_home, "capture-pane", "-p", "-t", f"={SHELL}:"):
                await anyio.sleep(0.02)
        stamp = _tmux(tether_home, "show-options", "-v", "-t", f"={SHELL}:", tmux_client.USER_INPUT_OPTION)
        assert stamp.strip().isdigit()
        await wait_terminal_contains(page, "typed-42")
        assert "old-line-1" in await terminal_text(page)
        await screenshot(page, "terminal")

        await page.click("#act-detach")
        with anyio.fail_after(HANG_S):
            while await tmux_client.terminal_clients(sock, SHELL) != 0:
                await anyio.sleep(0.02)
