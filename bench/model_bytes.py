"""What a typical tool result costs the model, per client shape (no assertions; see README).

MCP clients hand a tool result to the model in one of two shapes:

- text: the ``content`` text blocks (Claude Desktop, Cursor, Gemini CLI, VS Code, the Inspector);
- structured: ``structuredContent`` serialised as compact JSON whenever it is present (Codex CLI
  does exactly this, ``serde_json::to_string``; Claude Code hands the model the structured result
  too).

For each typical call this prints the bytes of both shapes, through ``tether mcp`` over stdio
with the official client. Run: .venv/bin/python bench/model_bytes.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

TETHER = str(Path(sys.executable).parent / "tether")


def text_bytes(result: types.CallToolResult) -> int:
    return sum(len(b.text.encode()) for b in result.content if isinstance(b, types.TextContent))


def structured_bytes(result: types.CallToolResult) -> int:
    if result.structured_content is None:
        return text_bytes(result)  # such clients fall back to the content blocks
    compact = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
    return len(compact.encode())


def run_task(shell: str, command: str) -> dict[str, Any]:
    return {
        "tasks": [
            {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": command},
                "wait": {"kind": "exit"},
            }
        ]
    }


async def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="thm", dir="/tmp"))
    (home / "bare").mkdir()
    env = {"TETHER_HOME": str(home), "PATH": os.environ["PATH"], "HOME": str(home / "bare")}
    rows: list[tuple[str, int, int, int]] = []
    try:
        async with Client(StdioServerParameters(command=TETHER, args=["mcp"], env=env)) as client:
            opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            assert opened.structured_content is not None
            shell = opened.structured_content["tasks"][0]["shell"]
            listing = "ls -la /usr/bin | head -40"
            calls: list[tuple[str, str, dict[str, Any]]] = [
                ("bash: echo hi", "bash", {"command": "echo hi", "description": "greet"}),
                ("bash: ls -la /usr/bin | head -40", "bash", {"command": listing, "description": "list"}),
                (
                    "bash: failing, with stderr",
                    "bash",
                    {"command": "ls /nonexistent; echo done", "description": "fail"},
                ),
                ("bash: seq 1 5000 (24 KB)", "bash", {"command": "seq 1 5000", "description": "count"}),
                ("shell_run: echo hi", "shell_run", run_task(shell, "echo hi")),
                ("shell_run: ls -la /usr/bin | head -40", "shell_run", run_task(shell, listing)),
            ]
            for label, tool, args in calls:
                result = await client.call_tool(tool, args)
                raw = len("".join(b.text for b in result.content if isinstance(b, types.TextContent)))
                rows.append((label, raw, text_bytes(result), structured_bytes(result)))
            started = await client.call_tool(
                "bash", {"command": listing, "description": "bg", "run_in_background": True}
            )
            assert started.structured_content is not None
            job = started.structured_content["jobId"]
            result = await client.call_tool("job_output", {"jobId": job, "timeoutMs": 5000})
            rows.append(
                ("job_output: ls -la /usr/bin | head -40", 0, text_bytes(result), structured_bytes(result))
            )
    finally:
        kill = ["tmux", "-S", str(home / "tmux.sock"), "kill-server"]
        await anyio.to_thread.run_sync(lambda: subprocess.run(kill, capture_output=True))
    print(f"{'result':42} {'text clients':>13} {'structured clients':>19} {'ratio':>6}")
    for label, _raw, text, structured in rows:
        print(f"{label:42} {text:>11} B {structured:>17} B {structured / max(text, 1):>6.2f}")


if __name__ == "__main__":
    anyio.run(main)
