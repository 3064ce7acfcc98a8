"""Smoke subset for an installed tether: the wheel in a fresh venv outside the repository.

``make smoke`` builds the wheel (``python -m build``: sdist, then the wheel from the sdist, which
fetches the panel's assets from the npm registry), installs it with pip into a fresh venv per
Python version (3.11, 3.12, 3.13) outside the checkout, and runs this file with that venv's
pytest. Each test drives the installed ``tether`` beside the venv's interpreter, as a user would:
an MCP round trip over stdio, one one-shot command (through MCP and ``tether exec``), one
persistent shell, the library with warnings as errors, ``tether serve`` with
the panel page loading in chromium.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import tether
from tether.panel.app import VENDOR_FILES

BIN = Path(sys.executable).parent
TETHER = str(BIN / "tether")
REPO = Path(__file__).resolve().parents[2]


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def stdio(home: Path) -> StdioServerParameters:
    env = {"TETHER_HOME": str(home), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    return StdioServerParameters(command=TETHER, args=["mcp"], env=env, cwd="/")


def test_the_installed_wheel_is_what_runs() -> None:
    # Not the checkout's source: the package, its panel assets and its script all come from the venv.
    package = Path(tether.__file__).resolve().parent
    assert sys.prefix != sys.base_prefix and package.is_relative_to(Path(sys.prefix).resolve())
    assert not package.is_relative_to(REPO), f"tether imported from the checkout: {package}"
    for name in VENDOR_FILES:
        assert (package / "panel" / "static" / "vendor" / name).stat().st_size > 0
    done = subprocess.run([TETHER, "--version"], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == f"tether {tether.__version__}"


async def test_mcp_round_trip_one_shot_command(tether_home: Path) -> None:
    async with Client(stdio(tether_home)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"bash", "job_list", "shell_open", "shell_run"} <= names
        result = await client.call_tool(
            "bash", {"command": "echo one-$((40+2)); echo err >&2; exit 3", "description": "smoke"}
        )
        assert text_of(result) == "one-42\n[stderr]\nerr\n[exit code: 3]"
        assert result.structured_content is not None and result.structured_content["exitCode"] == 3


def test_tether_exec_runs_a_command_and_ends_with_its_status(tether_home: Path) -> None:
    # Its start leaves out OpenSSL, which asyncio imports only if it can (every Python here).
    done = subprocess.run(
        [TETHER, "exec", "--", "echo one-$((40+2)); echo err >&2; exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={**os.environ, "TETHER_HOME": str(tether_home)},
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "one-42\n", "err\n[exit code: 3]\n")


_LIBRARY = """
import tether

with tether.BlockingTether() as t:
    print(t.call("bash", {"command": "echo one-$((40+2))", "description": "smoke"}).text)
    missing = t.call("shell_run", {"tasks": [{"target": {"sessions": "dsh-zzzzzz"},
                                              "action": {"kind": "run", "command": "true"}}]})
    print(missing.structured["tasks"][0]["errorCode"])
"""


def test_the_library_leaves_nothing_to_the_garbage_collector(tether_home: Path) -> None:
    # Each interpreter warns of its own things: 3.13 of every SQLite connection the collector
    # closes (the stores of the one-shot path and of the shells were, before 0285404).
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-W", "error::DeprecationWarning", "-c", _LIBRARY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env={**os.environ, "TETHER_HOME": str(tether_home)},
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "one-42\nNOT_FOUND\n", "")


async def _tasks(client: Client, tool: str, task: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, {"tasks": [task]})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    out: dict[str, Any] = result.structured_content["tasks"][0]
    return out


async def test_one_persistent_shell(tether_home: Path) -> None:
    async with Client(stdio(tether_home)) as client:
        opened = await _tasks(client, "shell_open", {"action": {"kind": "open", "label": "smoke"}})
        shell = opened["shell"]
        ran = await _tasks(
            client,
            "shell_run",
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": "cd /tmp && echo in-$(pwd)"},
                "wait": {"kind": "exit"},
            },
        )
        assert ran["exitCode"] == 0 and ran["lines"] == ["in-/tmp"]
        # The shell keeps its state between calls: that is what makes it persistent.
        again = await _tasks(
            client,
            "shell_run",
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": "pwd"},
                "wait": {"kind": "exit"},
            },
        )
        assert again["lines"] == ["/tmp"]
        closed = await _tasks(
            client, "shell_manage", {"target": {"sessions": shell}, "action": {"kind": "close"}}
        )
        assert closed["data"]["closed"] == [shell], closed


@pytest.fixture
def served(tether_home: Path) -> Iterator[tuple[list[str], subprocess.Popen[str]]]:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    process = subprocess.Popen(
        [TETHER, "serve", "--port", "0"],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Panel (open this link once"):
                break
        yield lines, process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):  # not left for the collector (a ResourceWarning)
            if pipe is not None:
                pipe.close()


@pytest.mark.browser
async def test_serve_with_the_panel_in_chromium(served: tuple[list[str], subprocess.Popen[str]]) -> None:
    from browser import chromium, panel_page, wait_terminal_contains

    lines, _ = served
    assert not any(line.startswith("Panel: unavailable") for line in lines), lines
    assert "Ready. Press Ctrl+C to stop." in lines
    url = next(line.split()[-1] for line in lines if line.strip().startswith("URL:"))
    token = next(line.split()[-1] for line in lines if line.strip().startswith("token:"))
    link = lines[-1].split()[-1]
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        opened = await _tasks(client, "shell_open", {"action": {"kind": "open", "label": "panel"}})
        shell = opened["shell"]
        await _tasks(
            client,
            "shell_run",
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": "echo seen-in-the-$((1+1))-panel"},
                "wait": {"kind": "exit"},
            },
        )
        async with chromium() as browser, panel_page(browser, link) as page:
            assert page.url.endswith("/panel/#/shells")
            base = url.removesuffix("/mcp")
            await page.goto(f"{base}/panel/#/shells/{shell}")
            # xterm.js (the wheel's vendored asset) draws the shell's screen.
            await wait_terminal_contains(page, "seen-in-the-2-panel")
            with anyio.fail_after(10):
                assert await page.evaluate("typeof window.Terminal") == "function"
