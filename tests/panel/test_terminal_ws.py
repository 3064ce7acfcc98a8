"""The terminal WebSocket protocol without a browser: bytes out, input and resize in, clean ends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import websockets
from panel_harness import Served, serving

from hang import HANG_S
from tether.audit import query as audit_query
from tether.panel.terminal.endpoint import MAX_INPUT_CHARS
from tether.shells import Shells, terminal_clients, window_size

SHELL = "dsh-w5test"


def _tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout


def _connect(served: Served, shell: str, query: str = "cols=90&rows=20") -> websockets.asyncio.client.connect:
    return websockets.connect(
        f"{served.ws_base}/panel/ws/term/{shell}?{query}",
        origin=served.origin,  # type: ignore[arg-type]
        additional_headers={"Cookie": served.cookie_header()},
    )


async def _until(ws: websockets.ClientConnection, needle: bytes) -> bytes:
    seen = b""
    with anyio.fail_after(HANG_S):
        while needle not in seen:
            frame = await ws.recv()
            if isinstance(frame, bytes):
                seen += frame
    return seen


async def test_input_resize_and_the_end_of_the_shell(tether_home: Path, home_shells: Shells) -> None:
    _tmux(
        tether_home,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        SHELL,
        "-x",
        "120",
        "-y",
        "30",
        "bash --norc",
    )
    _tmux(tether_home, "new-session", "-d", "-s", "dsh-keep00")  # keeps the server up after SHELL ends
    _tmux(tether_home, "set-option", "-g", "status", "off")
    async with serving(tether_home) as served, _connect(served, SHELL) as ws:
        await _until(ws, b"bash-")
        with anyio.fail_after(HANG_S):
            while await window_size(home_shells, SHELL) != (90, 20):
                await ws.recv()

        await ws.send(json.dumps({"type": "input", "data": "echo ws-$((2+3))\r", "typed": False}))
        await _until(ws, b"ws-5")
        # Not typed by a person (e.g. an automatic terminal reply): no user-input stamp.
        stamp = _tmux(tether_home, "show-options", "-v", "-q", "-t", f"={SHELL}:", "@tether_user_input_at")
        assert stamp.strip() == ""
        await ws.send(json.dumps({"type": "input", "data": "echo typed\r", "typed": True}))
        await _until(ws, b"typed")
        stamp = _tmux(tether_home, "show-options", "-v", "-t", f"={SHELL}:", "@tether_user_input_at")
        assert stamp.strip().isdigit()

        # Ignored, not fatal: a size no int holds (Python's JSON reads Infinity), half a UTF-16 pair.
        await ws.send('{"type": "resize", "cols": Infinity, "rows": -Infinity}')
        await ws.send('{"type": "input", "data": "\\ud800", "typed": true}')
        await ws.send("not json")
        await ws.send(b"\x00binary frame")  # not the protocol: ignored (it crashed the handler)
        await ws.send(json.dumps({"type": "resize", "cols": 100, "rows": 25}))
        with anyio.fail_after(HANG_S):
            while await window_size(home_shells, SHELL) != (100, 25):
                await ws.recv()

        _tmux(tether_home, "kill-session", "-t", f"={SHELL}")
        notice = None
        with anyio.fail_after(HANG_S):
            while notice is None:
                frame = await ws.recv()
                if isinstance(frame, str) and json.loads(frame)["type"] != "ping":  # the heartbeat
                    notice = json.loads(frame)
        assert notice == {"type": "exit", "message": f"shell {SHELL} ended"}

    actions = [(r.action, r.targets) for r in audit_query(tether_home, source="panel", shell=SHELL)]
    assert actions == [("terminal-attach", (SHELL,)), ("terminal-detach", (SHELL,))]


async def test_unknown_or_malformed_shell(tether_home: Path, home_shells: Shells) -> None:
    async with serving(tether_home) as served:
        for shell, code in (("dsh-gone00", 4404), ("dsh-BAD!", 4404)):
            async with _connect(served, shell) as ws:
                notice = json.loads(await ws.recv())
                assert notice["type"] == "error"
                with anyio.fail_after(HANG_S):
                    await ws.wait_closed()
                assert ws.close_code == code


async def test_leaving_detaches_the_client(tether_home: Path, home_shells: Shells) -> None:
    _tmux(
        tether_home,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        SHELL,
        "-x",
        "120",
        "-y",
        "30",
        "bash --norc",
    )
    async with serving(tether_home) as served:
        async with _connect(served, SHELL) as ws:
            await _until(ws, b"bash-")
            with anyio.fail_after(HANG_S):
                while await terminal_clients(home_shells, SHELL) != 1:
                    await ws.recv()
        # The client is gone and the window is back to the size it had before the page attached.
        with anyio.fail_after(HANG_S):
            while await terminal_clients(home_shells, SHELL) != 0 or await window_size(
                home_shells, SHELL
            ) != (120, 30):
                await anyio.sleep(0.02)


async def test_an_input_message_over_the_limit_is_cut_and_said(
    tether_home: Path, home_shells: Shells
) -> None:
    """The page sends a paste in pieces; a client that sends more in one message is told what was
    cut instead of losing it without a word."""
    pasted = tether_home / "got.txt"
    catcher = f"stty raw -echo; exec cat > {pasted}"  # every byte the pane gets, written down
    _tmux(tether_home, "-f", "/dev/null", "new-session", "-d", "-s", SHELL, "-x", "120", "-y", "30", catcher)
    texts: list[dict[str, Any]] = []
    async with serving(tether_home) as served, _connect(served, SHELL) as ws:

        async def read_all() -> None:
            # Read as it comes: a client that stops reading (its queue holds 16 frames) stops the
            # server's writes, its answer to our close among them, on a slow pass of the paste.
            async for frame in ws:
                if isinstance(frame, str):
                    texts.append(json.loads(frame))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all)
            with anyio.fail_after(HANG_S):
                while not pasted.exists():
                    await anyio.sleep(0.02)
            await ws.send(json.dumps({"type": "input", "data": "y" * (MAX_INPUT_CHARS + 10), "typed": True}))
            await ws.send(json.dumps({"type": "input", "data": "END", "typed": True}))
            with anyio.fail_after(HANG_S):
                while not pasted.read_bytes().endswith(b"END"):
                    await anyio.sleep(0.05)
            await ws.close()  # read_all ends with the connection, having read what came before
    notices = [t for t in texts if t["type"] != "ping"]  # less the heartbeat
    assert pasted.read_text() == "y" * MAX_INPUT_CHARS + "END"
    assert notices == [
        {
            "type": "notice",
            "message": f"input cut: 10 of {MAX_INPUT_CHARS + 10} characters were not sent "
            f"(at most {MAX_INPUT_CHARS} a message)",
        }
    ]
