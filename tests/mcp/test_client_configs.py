"""Client configuration: the README's blocks, what ``tether serve`` prints, and what they launch.

The README shows the blocks of ``tether.cli.client_configs`` rendered with its placeholders; a
running ``tether serve`` prints them with its own path, URL and token. The file-shaped blocks
(Claude Desktop, Cursor, VS Code, Codex) are checked against each client's documented format, and
the servers they describe are started and called here, over stdio and HTTP, with the official
SDK client. The command-line clients themselves are exercised by ``make test-clients``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import http_client, text_of
from pydantic import BaseModel, ConfigDict, ValidationError
from readme_blocks import readme_blocks

from hang import HANG_S
from serve_banner import banner_field, read_banner
from tether.cli.client_configs import Endpoint, client_blocks, placeholder_endpoint

TETHER = str(Path(sys.executable).parent / "tether")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Claude Desktop (modelcontextprotocol.io, "Connect to local MCP servers"): local servers only.
class DesktopServer(_Strict):
    command: str
    args: list[str] = []
    env: dict[str, str] = {}


class DesktopConfig(_Strict):
    mcpServers: dict[str, DesktopServer]


# Cursor (docs.cursor.com, "Model Context Protocol"): stdio servers or remote ones by url.
class CursorStdio(_Strict):
    type: Literal["stdio"] | None = None
    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    envFile: str | None = None


class CursorRemote(_Strict):
    type: Literal["http", "sse", "streamable-http"] | None = None
    url: str
    headers: dict[str, str] = {}


class CursorConfig(_Strict):
    mcpServers: dict[str, CursorStdio | CursorRemote]


# VS Code (code.visualstudio.com, "MCP configuration reference"): `servers`, each with a `type`.
class VsCodeStdio(_Strict):
    type: Literal["stdio"]
    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    envFile: str | None = None
    cwd: str | None = None


class VsCodeRemote(_Strict):
    type: Literal["http", "sse"]
    url: str
    headers: dict[str, str] = {}


class VsCodeConfig(_Strict):
    servers: dict[str, VsCodeStdio | VsCodeRemote]
    inputs: list[dict[str, Any]] = []


# Codex CLI (developers.openai.com/codex, "config.toml" `mcp_servers`): stdio or streamable HTTP.
class CodexStdio(_Strict):
    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None


class CodexHttp(_Strict):
    url: str
    bearer_token_env_var: str | None = None
    http_headers: dict[str, str] = {}


class CodexConfig(_Strict):
    mcp_servers: dict[str, CodexStdio | CodexHttp]


def test_readme_shows_every_client_block_exactly_as_rendered() -> None:
    rendered = {block.key: block for block in client_blocks(placeholder_endpoint())}
    shown = readme_blocks()
    assert set(shown) == set(rendered), "README client blocks differ from tether.cli.client_configs"
    for key, block in rendered.items():
        assert (shown[key].lang, shown[key].text) == (block.lang, block.text), key
    assert {"claude-code", "codex", "gemini", "claude-desktop", "cursor", "vscode", "inspector"} <= set(shown)


def test_file_blocks_have_each_clients_documented_shape() -> None:
    shown = readme_blocks()
    DesktopConfig.model_validate(json.loads(shown["claude-desktop"].text))
    cursor = CursorConfig.model_validate(json.loads(shown["cursor"].text))
    vscode = VsCodeConfig.model_validate(json.loads(shown["vscode"].text))
    codex = CodexConfig.model_validate(tomllib.loads(shown["codex"].text))
    for servers in (cursor.mcpServers, vscode.servers, codex.mcp_servers):
        assert set(servers) == {"tether", "tether-http"}
    # The models are strict enough to catch a wrong key or type (a checker that cannot fail is no check).
    with pytest.raises(ValidationError):
        VsCodeConfig.model_validate({"mcpServers": {}})
    with pytest.raises(ValidationError):
        CodexConfig.model_validate({"mcp_servers": {"t": {"url": "u", "headers": {"A": "b"}}}})


def test_stdio_entries_carry_an_explicit_tether_home() -> None:
    endpoint = Endpoint(command=("/x/tether",), url="http://h/mcp", token="t", env={"TETHER_HOME": "/s"})
    blocks = {block.key: block for block in client_blocks(endpoint)}
    assert "tether -e TETHER_HOME=/s -- /x/tether mcp" in blocks["claude-code"].text
    assert "-e TETHER_HOME=/s tether /x/tether mcp" in blocks["gemini"].text
    assert tomllib.loads(blocks["codex"].text)["mcp_servers"]["tether"]["env"] == {"TETHER_HOME": "/s"}
    for key in ("claude-desktop", "cursor"):
        assert json.loads(blocks[key].text)["mcpServers"]["tether"]["env"] == {"TETHER_HOME": "/s"}
    assert json.loads(blocks["vscode"].text)["servers"]["tether"]["env"] == {"TETHER_HOME": "/s"}


@pytest.fixture
def served(tether_home: Path) -> Iterator[tuple[str, str, str]]:
    """A real ``tether serve``: (banner up to Ready, URL, token)."""
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    process = subprocess.Popen(
        [TETHER, "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = read_banner(process.stdout)
        url, token = banner_field(banner, "URL"), banner_field(banner, "token")
        yield "".join(banner), url, token
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _substitute(text: str, url: str, token: str) -> str:
    """A README block with this test's values in place of the placeholders, as a reader edits it."""
    placeholder = placeholder_endpoint()
    text = text.replace(placeholder.command[0], TETHER).replace(placeholder.url, url)
    return text.replace(placeholder.token, token)


async def test_serve_prints_the_readme_blocks_with_its_own_values(
    tether_home: Path, served: tuple[str, str, str]
) -> None:
    banner, url, token = served
    endpoint = Endpoint(command=(TETHER,), url=url, token=token, env={"TETHER_HOME": str(tether_home)})
    for block in client_blocks(endpoint):
        assert f"{block.title} — {block.where}:\n{block.text}\n" in banner, block.key
    # Without TETHER_HOME in the environment the printed blocks are the README's, substituted.
    plain = Endpoint(command=(TETHER,), url=url, token=token)
    for block in client_blocks(plain):
        assert block.text == _substitute(readme_blocks()[block.key].text, url, token), block.key


async def _call_bash(client: Client, word: str) -> None:
    result = await client.call_tool("bash", {"command": f"echo {word}", "description": "check"})
    assert text_of(result) == word


async def test_the_servers_the_file_blocks_describe_answer(
    tether_home: Path, served: tuple[str, str, str]
) -> None:
    _, url, token = served
    shown = readme_blocks()
    files: dict[str, dict[str, Any]] = {
        "claude-desktop": json.loads(_substitute(shown["claude-desktop"].text, url, token))["mcpServers"],
        "cursor": json.loads(_substitute(shown["cursor"].text, url, token))["mcpServers"],
        "vscode": json.loads(_substitute(shown["vscode"].text, url, token))["servers"],
        "codex": tomllib.loads(_substitute(shown["codex"].text, url, token))["mcp_servers"],
    }
    env = {"TETHER_HOME": str(tether_home), "PATH": "/usr/bin:/bin", "HOME": str(tether_home)}
    for key, servers in files.items():
        for name, entry in servers.items():
            if "command" in entry:
                params = StdioServerParameters(
                    command=entry["command"], args=entry["args"], env={**env, **entry.get("env", {})}
                )
                async with Client(params) as client:
                    await _call_bash(client, f"{key}-{name}-stdio")
            else:
                headers = entry.get("headers") or entry.get("http_headers")
                assert entry["url"] == url and headers == {"Authorization": f"Bearer {token}"}, key
                async with http_client(entry["url"], token=token) as client:
                    await _call_bash(client, f"{key}-{name}-http")
