"""The panel on a remote shell, in a real browser: the list names the shell's host, and its
terminal (ssh through the host's shared connection, ``tmux attach`` there) shows the shell's
scrollback and output and takes a person's typing, exactly as for a local shell."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from browser import chromium, panel_page, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, serving_tools
from sshd_harness import RemoteHosts

from hang import HANG_MS, HANG_S
from tether.audit import query as audit_query
from tether.panel.app import login_url
from tether.shells import Shells, open_shell, terminal_clients, user_input_stamp


@pytest.mark.browser
async def test_the_panel_lists_watches_and_types_into_a_remote_shell(
    tether_home: Path, remote: RemoteHosts
) -> None:
    remote.add("box-a")
    async with (
        serving_tools(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        # The app's own Shells (same home, same loop): the shell is opened as the panel would.
        shells = Shells.get(served.config)
        rec, reached = await open_shell(
            shells,
            owner="panel",
            label="far",
            cwd=None,
            cols=100,
            rows=20,
            idle_minutes=None,
            host_name="box-a",
        )
        assert reached
        host = shells.hosts["box-a"]
        pane = await host.pane_now(rec.id)
        await host.type_line(pane, "seq -f 'far-line-%g' 1 60")
        with anyio.fail_after(HANG_S):
            while "far-line-60" not in "\n".join(await host.capture(pane)):
                await anyio.sleep(0.02)

        row = page.locator(f'#shells tr[data-id="{rec.id}"]')
        await row.wait_for()
        assert "box-a" in await row.locator(".badge.host").inner_text()
        # Filterable by host: a local shell beside it, each filter keeps only its own host's rows.
        near, near_reached = await open_shell(
            shells, owner="panel", label="near", cwd=None, cols=80, rows=24, idle_minutes=None
        )
        assert near_reached
        near_row = page.locator(f'#shells tr[data-id="{near.id}"]')
        await near_row.wait_for()
        await page.select_option("#f-host", "box-a")
        await near_row.wait_for(state="hidden", timeout=HANG_MS)
        await row.wait_for(state="visible", timeout=HANG_MS)
        await page.select_option("#f-host", "local")
        await row.wait_for(state="hidden", timeout=HANG_MS)
        await near_row.wait_for(state="visible", timeout=HANG_MS)
        await page.select_option("#f-host", "")
        await row.wait_for(state="visible", timeout=HANG_MS)

        await page.goto(f"{served.base}/panel/#/shells/{rec.id}")
        await wait_terminal_contains(page, "far-line-60")
        await wait_terminal_contains(page, "far-line-1")  # scrollback above the screen, read over ssh
        assert await terminal_clients(shells, rec.id) == 1  # a real client on the host's tmux

        await page.click(f'.cell[data-shell="{rec.id}"] .cell-term')
        await page.keyboard.type("echo typed-$((6*7))-far")
        await page.keyboard.press("Enter")
        with anyio.fail_after(HANG_S):
            while "typed-42-far" not in "\n".join(await host.capture(pane)):
                await anyio.sleep(0.02)
        await wait_terminal_contains(page, "typed-42-far")
        # The person's keystroke was stamped on the host's tmux (agents' writes see a person typing).
        assert await user_input_stamp(shells, rec.id)
        # And who pressed Enter was noted against tether's copy of the host's log: the timeline
        # names them (here whoever holds the serve token).
        with anyio.fail_after(HANG_S):
            while not (
                typed := [
                    c
                    for c in (
                        await served.panel.calls.tool("shell_timeline", {"shell": rec.id}, audited=False)
                    ).structured["commands"]
                    if c["text"] == "echo typed-$((6*7))-far" and c["endedMs"] is not None
                ]
            ):
                await anyio.sleep(0.05)
        assert [c["typist"] for c in typed] == ["panel"]
        assert "far-line-1" in await terminal_text(page)

        await page.click(f'.cell[data-shell="{rec.id}"] .cell-close')
        with anyio.fail_after(HANG_S):
            while await terminal_clients(shells, rec.id) != 0:
                await anyio.sleep(0.02)
        records = audit_query(tether_home, source="panel", shell=rec.id)
        attach = [r for r in records if r.action == "terminal-attach"]
        assert attach and "on host box-a" in (attach[-1].detail or "")
