"""Harness for persistent-shell tool tests: ``tether mcp`` over stdio, driven by the SDK client."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters

from hang import HANG_MS

TETHER = str(Path(sys.executable).parent / "tether")
MARKER_TRACES = re.compile(r"\]6973;|\x1b|__tether")  # an integration event, an escape, tether's names


def params(home: Path, conversation: str, extra_env: dict[str, str] | None = None) -> StdioServerParameters:
    env = {
        "TETHER_HOME": str(home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "TETHER_CONVERSATION": conversation,
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        **(extra_env or {}),
    }
    return StdioServerParameters(command=TETHER, args=["mcp"], env=env)


@asynccontextmanager
async def shell_client(
    home: Path, conversation: str = "conv-a", *, extra_env: dict[str, str] | None = None, **kw: Any
) -> AsyncIterator[Client]:
    async with Client(params(home, conversation, extra_env), **kw) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def no_marker(text: str) -> str:
    assert not MARKER_TRACES.search(text), f"marker trace in returned text: {text!r}"
    return text


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Call a tool; returns (text, structuredContent) after checking no marker leaked."""
    result = await client.call_tool(tool, args)
    text = no_marker(text_of(result))
    return text, dict(result.structured_content or {})


async def open_shell(client: Client, **action: Any) -> str:
    _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", **action}}]})
    shell = data["tasks"][0]["shell"]
    assert isinstance(shell, str) and shell.startswith("dsh-"), data
    return shell


async def run(client: Client, shell: str, command: str, **extra: Any) -> dict[str, Any]:
    # A wait the test expects to be met has no deadline of its own to beat (a busy machine only
    # makes it slower): HANG_MS, just under the per-test timeout, only turns a hang into a result
    # that says what held the shell (its screen, what is in front) instead of a bare timeout.
    wait = extra.pop("wait", {"kind": "exit", "timeoutMs": HANG_MS})
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": command},
        "wait": wait,
        **extra,
    }
    _, data = await call(client, "shell_run", {"tasks": [task]})
    task_out: dict[str, Any] = data["tasks"][0]
    return task_out


async def read(
    client: Client, shell: str, action: dict[str, Any] | None = None, **task: Any
) -> dict[str, Any]:
    """One ``shell_read`` task; its result entry."""
    args = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", **(action or {})}, **task}]}
    _, data = await call(client, "shell_read", args)
    out: dict[str, Any] = data["tasks"][0]
    return out


async def send(client: Client, shell: str, text: str, keys: list[str] | None = None) -> dict[str, Any]:
    action = {"kind": "send", "text": text, "keys": keys or []}
    _, data = await call(client, "shell_send", {"tasks": [{"target": {"sessions": shell}, "action": action}]})
    out: dict[str, Any] = data["tasks"][0]
    return out


def tmux(home: Path, *args: str) -> str:
    """A tmux command on the test's server, as a person at a terminal would run it."""
    import subprocess

    done = subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    )
    return done.stdout
