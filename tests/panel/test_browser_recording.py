"""Recordings in the page: exported as asciicast v2 (never holding a vault value) and replayed in
the page at 1× and 4×, with a jump to a command; the replay shows the same text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, panel_page, screenshot, wait_terminal_contains
from panel_harness import TOKEN, agent, open_shells, run_in, serving_tools
from playwright.async_api import Page

from hang import HANG_MS
from tether.config import load_config
from tether.panel.app import login_url
from tether.store.vault import Vault

SECRET = "rec0rd-S3cret-value"
PLAYER_TEXT = """() => { const b = window.tetherPlayer.term.buffer.active; const out = [];
    for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
    return out.join('\\n'); }"""


async def _player_text(page: Page) -> str:
    text: str = await page.evaluate(PLAYER_TEXT)
    return text


@pytest.mark.browser
@pytest.mark.timeout(180)
async def test_a_recording_is_exported_and_replayed_with_the_same_text(tether_home: Path) -> None:
    vault = Vault.open(load_config(tether_home))
    try:
        vault.set("API_KEY", SECRET)
    finally:
        vault.store.close()
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, label="rec", cols=80, rows=20)
        commands = ["echo step-one-$((1+1))", "sleep 1; echo step-two-$((2+2))", "echo key={{vault.API_KEY}}"]
        for command in commands:
            assert (await run_in(client, shell, command))["exitCode"] == 0
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        # The person's own terminal draws what tmux drew (the value the shell printed); a recording
        # is text handed on, and is masked.
        await wait_terminal_contains(page, f"key={SECRET}")

        await page.keyboard.press("Control+BracketRight")
        await page.keyboard.press("r")
        async with page.expect_download() as download_info:
            await page.click("#record-export")
        download = await download_info.value
        assert download.suggested_filename == f"{shell}.cast"
        saved = tether_home / "export.cast"
        await download.save_as(saved)
        raw = saved.read_text()
        lines = raw.splitlines()
        header: dict[str, Any] = json.loads(lines[0])
        events = [json.loads(line) for line in lines[1:]]
        # The size the shell has now (the person's terminal sized its window when it attached).
        size = await page.evaluate(
            f"() => [window.tetherTerms['{shell}'].cols, window.tetherTerms['{shell}'].rows]"
        )
        assert [header["version"], header["width"], header["height"]] == [2, *size]
        assert [e[0] for e in events] == sorted(e[0] for e in events)
        output = "".join(e[2] for e in events if e[1] == "o")
        assert "step-one-2" in output and "step-two-4" in output and "key=[vault:API_KEY]" in output
        assert SECRET not in raw
        assert [e[2] for e in events if e[1] == "m"] == commands
        # The note says what the file holds (it said "NaN s": the page read a field the API lacks).
        note = await page.locator("#record-note").text_content()
        said = re.fullmatch(r"(\d+) output events over (\d+\.\d) s; vault values masked", note or "")
        assert said is not None, note
        assert int(said[1]) == sum(1 for e in events if e[1] == "o")
        assert float(said[2]) >= 1.0  # one command slept for a second

        # Replay here at 4×: the same text as the recording.
        await page.click("#record-play")
        await page.locator("#player-dialog[open]").wait_for()
        await page.keyboard.press("4")
        await page.locator('#player-speed-4[aria-pressed="true"]').wait_for()
        await page.wait_for_function("() => window.tetherPlayer.done", timeout=HANG_MS)
        replayed = await _player_text(page)
        for expected in ("step-one-2", "step-two-4", "key=[vault:API_KEY]", *commands[:2]):
            assert expected in replayed, replayed
        assert SECRET not in replayed
        await screenshot(page, "replay")

        # Jump to the second command: what came before it is drawn, what came after is not yet.
        await page.keyboard.press("Space")  # pause (it is done: pressing plays again from the start)
        await page.keyboard.press("Space")
        await page.locator("#player-marks button").nth(1).click()
        await page.wait_for_function("() => !window.tetherPlayer.drawing && !window.tetherPlayer.playing")
        text = await _player_text(page)
        assert "step-one-2" in text and "key=[vault" not in text
        await page.keyboard.press("1")
        await page.locator('#player-speed-1[aria-pressed="true"]').wait_for()
        await page.keyboard.press("Space")  # play on from the second command at 1×
        await page.wait_for_function("() => window.tetherPlayer.done", timeout=HANG_MS)
        assert "key=[vault:API_KEY]" in await _player_text(page)
        await page.keyboard.press("Escape")
        await page.locator("#player-dialog[open]").wait_for(state="detached")
