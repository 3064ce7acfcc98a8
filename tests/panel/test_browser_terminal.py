"""The page's terminal in a real browser against a real tmux shell (agent tools only to open one)."""

from __future__ import annotations

import subprocess
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from browser import cell_cursor, chromium, panel_page, screenshot, terminal_text, wait_terminal_contains
from panel_harness import TOKEN, agent, free_port, open_shells, serving, serving_tools
from playwright.async_api import Page

from hang import HANG_MS, HANG_S
from tether.panel.app import login_url
from tether.panel.terminal import endpoint
from tether.shells import Shells, terminal_clients

SHELL = "dsh-br0wse"


def _tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout


def _tmux_cursor(home: Path) -> tuple[int, int, int, int]:
    out = _tmux(
        home,
        "display-message",
        "-p",
        "-t",
        f"={SHELL}:",
        "#{cursor_x} #{cursor_y} #{pane_width} #{pane_height}",
    )
    x, y, w, h = (int(v) for v in out.split())
    return x, y, w, h


async def _cursor_agrees(page: Page, home: Path) -> None:
    """xterm.js and tmux agree on the size and on where the cursor is (no status line: the pane is
    the whole screen)."""
    with anyio.fail_after(HANG_S):
        while (await cell_cursor(page, SHELL)) != _tmux_cursor(home):
            await anyio.sleep(0.05)


@pytest.mark.browser
async def test_terminal_shows_scrollback_streams_output_and_takes_typing(
    tether_home: Path, home_shells: Shells
) -> None:
    # A session tether did not make (a server without tether's options: tmux's status bar is on).
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
        assert await terminal_clients(home_shells, SHELL) == 1
        # No tmux status bar inside the terminal: the session's status is off before the attach.
        assert _tmux(tether_home, "show-options", "-v", "-t", f"={SHELL}:", "status").strip() == "off"
        assert f"[{SHELL}]" not in await terminal_text(page)
        await _cursor_agrees(page, tether_home)

        _tmux(tether_home, "send-keys", "-t", f"={SHELL}:", "echo streamed-$((40+2))", "Enter")
        await wait_terminal_contains(page, "streamed-42")

        await page.click(f'.cell[data-shell="{SHELL}"] .cell-term')
        await page.keyboard.type("echo typed-$((6*7))")
        await page.keyboard.press("Enter")
        with anyio.fail_after(HANG_S):
            while "typed-42" not in _tmux(tether_home, "capture-pane", "-p", "-t", f"={SHELL}:"):
                await anyio.sleep(0.02)
        stamp = _tmux(tether_home, "show-options", "-v", "-t", f"={SHELL}:", "@tether_user_input_at")
        assert stamp.strip().isdigit()
        await wait_terminal_contains(page, "typed-42")
        assert "old-line-1" in await terminal_text(page)
        await screenshot(page, "terminal")

        # Detach and attach again, twice: the cursor is where tmux has it each time (it was off by
        # the rows a late refit changed, before the terminal sent its size once connected).
        for _ in range(2):
            await page.click(f'.cell[data-shell="{SHELL}"] .cell-close')
            with anyio.fail_after(HANG_S):
                while await terminal_clients(home_shells, SHELL) != 0:
                    await anyio.sleep(0.02)
            await page.goto(f"{served.base}/panel/#/shells/{SHELL}")
            await wait_terminal_contains(page, "typed-42")
            await _cursor_agrees(page, tether_home)
            await page.keyboard.type("echo again")
            await wait_terminal_contains(page, "echo again")
            await _cursor_agrees(page, tether_home)
            await page.keyboard.press("Control+C")


@pytest.mark.browser
async def test_a_terminal_reattaches_after_the_server_restarts(tether_home: Path) -> None:
    """The terminal's socket is lost when the server stops (the shell lives on in tmux): the cell
    says so, says the keys typed meanwhile were not sent, and reattaches once the server is back."""
    port = free_port()  # the restarted server must be where the page expects it
    async with chromium() as browser, AsyncExitStack() as pages:
        async with serving_tools(tether_home, port=port) as served:
            async with agent(served) as client:
                (shell,) = await open_shells(client, label="back")
            note = f'.cell[data-shell="{shell}"] .cell-note'
            page = await pages.enter_async_context(panel_page(browser, login_url(served.base, TOKEN)))
            await page.goto(f"{served.base}/panel/#/shells/{shell}")
            await page.locator(note, has_text="attached:").wait_for(timeout=HANG_MS)
            await page.click(f'.cell[data-shell="{shell}"] .cell-term')
            await page.keyboard.type("echo before-$((1+1))")
            await page.keyboard.press("Enter")
            await wait_terminal_contains(page, "before-2")

        # Whatever the page makes of the lost socket, it has said something else than "attached".
        await page.wait_for_function(
            "(sel) => !document.querySelector(sel).textContent.startsWith('attached')",
            arg=note,
            timeout=HANG_MS,
        )
        assert await page.locator(note).text_content() == "connection lost; reconnecting…"
        await page.keyboard.type("lost")
        assert await page.locator(note).text_content() == (
            "connection lost; reconnecting… — not sent: 4 characters typed while not attached"
        )

        async with serving_tools(tether_home, port=port):
            await page.locator(note, has_text="attached:").wait_for(timeout=HANG_MS)
            await page.keyboard.type("echo after-$((2+2))")
            await page.keyboard.press("Enter")
            await wait_terminal_contains(page, "after-4")
            assert "lost" not in _tmux(tether_home, "capture-pane", "-p", "-t", f"={shell}:")

            # Detached on purpose (not lost): the cell stays closed; choosing the shell attaches it.
            _tmux(tether_home, "detach-client", "-s", f"={shell}")
            await page.locator(f'.cell.closed[data-shell="{shell}"]').wait_for(timeout=HANG_MS)
            assert await page.locator(note).text_content() == "detached"
            await page.click(f'#shells [data-shell="{shell}"].open-btn')
            await page.locator(note, has_text="attached:").wait_for(timeout=HANG_MS)
            await page.keyboard.type("echo again-$((3+3))")
            await page.keyboard.press("Enter")
            await wait_terminal_contains(page, "again-6")
            await page.close()  # before the server stops: no reconnecting page left behind


@pytest.mark.browser
async def test_a_paste_larger_than_one_input_message_arrives_whole(tether_home: Path) -> None:
    """A 2 MiB paste reaches the shell whole (the page sends it in pieces; as one message, the
    server took its first MiB and dropped the rest without a word)."""
    pasted = tether_home / "pasted.txt"
    # A pane that writes down every byte it gets (no line discipline: a raw terminal).
    catcher = f"stty raw -echo; exec cat > {pasted}"
    _tmux(tether_home, "-f", "/dev/null", "new-session", "-d", "-s", SHELL, "-x", "100", "-y", "20", catcher)
    text = "".join(str(i).rjust(127, "x") + "\r" for i in range(16400))  # xterm pastes a newline as CR
    async with (
        serving(tether_home) as served,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        await page.goto(f"{served.base}/panel/#/shells/{SHELL}")
        await page.locator(f'.cell[data-shell="{SHELL}"] .cell-note', has_text="attached:").wait_for()
        with anyio.fail_after(HANG_S):
            while not pasted.exists():
                await anyio.sleep(0.02)
        await page.click(f'.cell[data-shell="{SHELL}"] .cell-term')
        await page.evaluate("([shell, text]) => window.tetherTerms[shell].paste(text)", [SHELL, text])
        await page.keyboard.type("END")  # typed after the paste: it arrives after all of it
        with anyio.fail_after(HANG_S):
            while not pasted.read_bytes().endswith(b"END"):
                await anyio.sleep(0.05)
        got = pasted.read_text().replace("\r", "\n")  # the pty may still turn a CR into a newline
        assert got == text.replace("\r", "\n") + "END", (len(got), len(text))


@pytest.mark.browser
async def test_a_terminal_whose_shell_exits_says_it_ended(tether_home: Path) -> None:
    """A person types ``exit`` in a watched shell: its cell says the shell ended and stays closed,
    and choosing it again does not attach. (tmux keeps the dead pane for tether — remain-on-exit —
    so the client stayed attached to it and the cell went on saying "typing goes to the shell".)"""
    async with (
        serving_tools(tether_home) as served,
        agent(served) as client,
        chromium() as browser,
        panel_page(browser, login_url(served.base, TOKEN)) as page,
    ):
        (shell,) = await open_shells(client, 1, cols=90, rows=20)
        cell = page.locator(f'.cell[data-shell="{shell}"]')
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await cell.locator(".cell-note", has_text="attached:").wait_for()
        await cell.locator(".cell-term").click()
        await page.keyboard.type("exit\n")
        await cell.locator(".cell-note", has_text=f"shell {shell} ended").wait_for()
        assert await cell.evaluate("(c) => c.classList.contains('closed')")
        # Opened again: the server says it ended instead of attaching to its dead pane.
        await page.locator(f'#shells tr[data-id="{shell}"]').wait_for(state="detached")
        await page.goto(f"{served.base}/panel/#/shells")
        await page.goto(f"{served.base}/panel/#/shells/{shell}")
        await cell.locator(".cell-note", has_text=f"shell {shell} ended").wait_for()
        assert "attached:" not in await cell.locator(".cell-note").inner_text()


@pytest.mark.browser
async def test_sockets_that_go_silent_are_reattached(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laptop that slept, or a network that dropped without a word: the page's sockets stay
    "open" with nothing behind them. The header went on saying live while the list (and the
    questions waiting for an answer) never changed again, and the cell said "attached" while the
    keys typed into it were lost. The server now pings both sockets, and a page that hears nothing
    for three pings takes the socket for dead and connects again."""
    monkeypatch.setattr(endpoint, "HEARTBEAT_S", 2.0)  # six seconds of silence: dead
    dead: set[int] = set()  # routes of the connections cut (those open when the network dropped)
    opened: list[Any] = []

    def cut(route: Any) -> None:
        server = route.connect_to_server()
        opened.append(route)
        route.on_message(lambda m: None if id(route) in dead else server.send(m))
        server.on_message(lambda m: None if id(route) in dead else route.send(m))
        server.on_close(
            lambda code, reason: None if id(route) in dead else route.close(code=code, reason=reason)
        )

    async with serving_tools(tether_home) as served, agent(served) as client, chromium() as browser:
        (shell,) = await open_shells(client, label="sleeper")
        async with panel_page(browser, login_url(served.base, TOKEN)) as page:
            await page.route_web_socket(lambda url: "/panel/ws/" in url, cut)
            await page.goto(f"{served.base}/panel/#/shells/{shell}")
            await page.reload()  # the events socket was opened at sign-in, before the route
            note = f'.cell[data-shell="{shell}"] .cell-note'
            await page.locator(note, has_text="attached:").wait_for(timeout=HANG_MS)
            await page.locator(f'#shells tbody tr[data-id="{shell}"]').wait_for(timeout=HANG_MS)
            before = len(opened)
            dead.update(id(route) for route in opened)  # the network drops, nobody is told

            (later,) = await open_shells(client, label="woken")
            await page.locator(f'#shells tbody tr[data-id="{later}"]').wait_for(timeout=HANG_MS)
            with anyio.fail_after(HANG_S):  # a new terminal socket, not only a new events socket
                while not any("/ws/term/" in r.url for r in opened[before:]):
                    await anyio.sleep(0.05)
            await page.locator(note, has_text="attached:").wait_for(timeout=HANG_MS)
            await page.click(f'.cell[data-shell="{shell}"] .cell-term')
            await page.keyboard.type("echo awake-$((20+22))")
            await page.keyboard.press("Enter")
            await wait_terminal_contains(page, "awake-42")
