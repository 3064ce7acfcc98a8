"""The sandbox through the front door: ``tether mcp --sandbox`` as a real subprocess, driven by the
official MCP SDK client over stdio."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from hang import HANG_S

TETHER = str(Path(sys.executable).parent / "tether")


def _params(home: Path, work: Path, *args: str) -> StdioServerParameters:
    env = {
        "TETHER_HOME": str(home),
        "PATH": os.environ["PATH"],
        "HOME": str(work.parent / "user"),
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    return StdioServerParameters(command=TETHER, args=["mcp", *args], env=env, cwd=str(work))


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def _bash_tool(client: Client) -> tuple[dict[str, Any], str]:
    tools = (await client.list_tools()).tools
    bash = next(tool for tool in tools if tool.name == "bash")
    return bash.input_schema, bash.description or ""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "user").mkdir()
    return tmp_path / "work"


async def test_schema_has_sandbox_fields_only_when_sandboxed(tether_home: Path, work: Path) -> None:
    async with Client(_params(tether_home, work)) as client:
        plain, plain_description = await _bash_tool(client)
    assert "sandbox_permissions" not in plain["properties"] and "justification" not in plain["properties"]
    assert "sandbox" not in plain_description
    async with Client(_params(tether_home, work, "--sandbox")) as client:
        confined, description = await _bash_tool(client)
    assert "Commands run in a sandbox" in description and "`allow_network`: " in description
    assert confined["properties"]["sandbox_permissions"]["enum"] == [
        "use_default",
        "allow_network",
        "allow_host_write",
        "require_escalated",
    ]
    assert confined["properties"]["justification"]["type"] == "string"


async def test_a_denial_reaches_the_model_with_marker_and_hint(tether_home: Path, work: Path) -> None:
    target = "/usr/tether-sandbox-mcp-test"
    # Nobody is there to approve (no elicitation, no panel): the question expires at once.
    (tether_home / "config.toml").write_text("[approvals]\ntimeout_s = 0\n")
    async with Client(_params(tether_home, work, "--sandbox")) as client:
        result = await client.call_tool(
            "bash", {"command": f"echo ok > ok.txt; echo x > {target}", "description": "write outside"}
        )
        text = _text(result)
        assert not result.is_error
        assert f"[sandbox denied: write {target}]" in text
        assert 'sandbox_permissions="allow_host_write"' in text and "[exit code: 1]" in text
        assert result.structured_content is not None
        sandbox = result.structured_content["sandbox"]
        assert sandbox["permissions"] == "use_default" and sandbox["denied"] is True
        assert sandbox["denials"][0]["kind"] == "write" and sandbox["denials"][0]["target"] == target
        assert (work / "ok.txt").read_text() == "ok\n"

        blank = await client.call_tool(
            "bash",
            {
                "command": "true",
                "description": "widen",
                "sandbox_permissions": "allow_network",
                "justification": " ",
            },
        )
        assert blank.is_error and "justification" in _text(blank)
        refused = await client.call_tool(
            "bash",
            {
                "command": "true",
                "description": "widen",
                "sandbox_permissions": "allow_network",
                "justification": "fetch packages",
            },
        )
        assert refused.is_error and "nobody answered sandbox_permissions 'allow_network'" in _text(refused)
    assert not _exists(target)


@pytest.mark.parametrize(
    ("door", "shell_table"),
    [
        (["mcp", "--sandbox"], ""),
        (["serve", "--sandbox", "--port", "0"], ""),
        (["mcp"], '[shell]\nprovider = "sandbox"\n'),
    ],
)
def test_a_missing_bwrap_refuses_to_serve(
    tether_home: Path, work: Path, door: list[str], shell_table: str
) -> None:
    (tether_home / "config.toml").write_text(f'{shell_table}[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    params = _params(tether_home, work)
    done = subprocess.run(
        [params.command, *door],
        env=params.env,
        cwd=params.cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 2
    assert "never falls back to running unconfined" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
