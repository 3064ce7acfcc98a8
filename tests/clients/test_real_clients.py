"""The README's client blocks, run through the real clients (``make test-clients``).

``make test-clients`` installs Claude Code, Codex CLI, Gemini CLI and the MCP Inspector from the
npm registry into a scratch prefix (tests/clients/package.json, exact versions) and points
``TETHER_CLIENTS`` at it. Each test pastes the README's block for one client, with this test's
path, URL and token in place of the placeholders, into a fresh HOME, and asks the client itself
whether it connects, over stdio and over HTTP with the token. No account and no network beyond
loopback: every client runs with its telemetry off, and none of these commands needs a login.

What each client's own command proves, and what it cannot:
- ``claude mcp list`` and ``gemini mcp list`` start the stdio server and connect to the HTTP one
  (an MCP ``initialize``), and report each; a wrong token is reported as failing.
- ``codex mcp list`` only reads the configuration (Codex connects when a model turn starts, which
  needs an account): the test checks Codex's reading of the block and then starts and calls the
  servers exactly as Codex read them.
- The Inspector CLI lists the tools and calls ``bash`` over stdio and over HTTP.
Calling a tool through Claude Code, Codex or Gemini needs their model: not done here.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import http_client, text_of
from readme_blocks import readme_blocks

from serve_banner import banner_field, read_banner
from tether.cli.client_configs import placeholder_endpoint

TETHER = str(Path(sys.executable).parent / "tether")
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "GEMINI_TELEMETRY_ENABLED": "false",
    "NO_UPDATE_NOTIFIER": "1",
    "NO_COLOR": "1",
    "CI": "1",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """A fresh HOME whose ~/.tether is this test's TETHER_HOME, a serving tether, the clients."""

    home: Path
    work: Path  # the folder the clients run in
    prefix: Path  # where make test-clients installed them
    url: str
    token: str
    env: dict[str, str]

    def block_lines(self, key: str) -> list[str]:
        return [line for line in self.block(key).splitlines() if line.strip()]

    def block(self, key: str) -> str:
        """The README's block for ``key``, as a reader fills it in."""
        placeholder = placeholder_endpoint()
        text = readme_blocks()[key].text.replace(placeholder.command[0], TETHER)
        return text.replace(placeholder.url, self.url).replace(placeholder.token, self.token)

    def sh(self, line: str, *, cwd: Path | None = None, timeout: float = 120, stderr: bool = False) -> str:
        """Run one line in bash as a user would; its stdout (and stderr, for clients that report there)."""
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd or self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr if stderr else done.stdout


@pytest.fixture
def world(tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    clients = os.environ.get("TETHER_CLIENTS")
    if not clients:
        pytest.fail("TETHER_CLIENTS is not set: run these through `make test-clients`")
    prefix = Path(clients)
    home = tether_home.with_name(tether_home.name + "-home")
    home.mkdir()
    (home / ".tether").symlink_to(tether_home)  # the clients' default state directory is this test's
    work = home / "project"
    work.mkdir()
    env = {
        "PATH": f"{prefix / 'node_modules' / '.bin'}:{os.environ['PATH']}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        **QUIET,
    }
    monkeypatch.delenv("TETHER_HOME")
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
        assert (tether_home / "token").read_text().strip() == token  # served from this test's home
        yield World(home=home, work=work, prefix=prefix, url=url, token=token, env=env)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _bad_token(world: World, line: str) -> str:
    return line.replace(world.token, "not-the-token").replace("tether-http", "tether-badtoken")


def test_claude_code_connects_over_stdio_and_http(world: World) -> None:
    lines = world.block_lines("claude-code")
    for line in lines:
        world.sh(line)
    world.sh(_bad_token(world, lines[1]))
    listed = world.sh("claude mcp list")
    assert f"tether: {TETHER} mcp - ✔ Connected" in listed, listed
    assert f"tether-http: {world.url} (HTTP) - ✔ Connected" in listed, listed
    assert "tether-badtoken:" in listed and f"tether-badtoken: {world.url} (HTTP) - ✔" not in listed, listed


def test_gemini_cli_connects_over_stdio_and_http(world: World) -> None:
    lines = world.block_lines("gemini")
    for line in lines:
        world.sh(line)
    world.sh(_bad_token(world, lines[1]))
    # Gemini CLI starts MCP servers only in a folder the user trusts (it asks on first start).
    (world.home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(world.work): "TRUST_FOLDER"}))
    listed = world.sh("gemini mcp list", stderr=True)  # Gemini CLI reports on stderr
    assert f"✓ tether: {TETHER} mcp (stdio) - Connected" in listed, listed
    assert f"✓ tether-http: {world.url} (http) - Connected" in listed, listed
    assert "tether-badtoken:" in listed and f"✓ tether-badtoken: {world.url} (http) - Connected" not in listed


async def test_codex_reads_the_block_and_what_it_read_answers(world: World) -> None:
    config = world.home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(world.block("codex") + "\n")
    listed = {entry["name"]: entry for entry in json.loads(world.sh("codex mcp list --json"))}
    assert set(listed) == {"tether", "tether-http"} and all(entry["enabled"] for entry in listed.values())
    stdio = listed["tether"]["transport"]
    assert (stdio["type"], stdio["command"], stdio["args"]) == ("stdio", TETHER, ["mcp"])
    http = listed["tether-http"]["transport"]
    assert (http["type"], http["url"]) == ("streamable_http", world.url)
    assert listed["tether-http"]["auth_status"] == "bearer_token" or "http_headers" in http
    shown = world.sh("codex mcp get tether-http")
    assert "http_headers: Authorization=*****" in shown, shown
    # Start and call the servers as Codex read them.
    params = StdioServerParameters(command=stdio["command"], args=stdio["args"], env=world.env)
    async with Client(params) as client:
        result = await client.call_tool("bash", {"command": "echo codex-stdio", "description": "check"})
        assert text_of(result) == "codex-stdio"
    async with http_client(http["url"], token=world.token) as client:
        result = await client.call_tool("bash", {"command": "echo codex-http", "description": "check"})
        assert text_of(result) == "codex-http"


def test_inspector_lists_and_calls_over_stdio_and_http(world: World) -> None:
    kernel = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    lines = world.block_lines("inspector")
    assert [("http" in line, "tools/call" in line) for line in lines] == [
        (False, False),
        (False, True),
        (True, False),
        (True, True),
    ]
    for line in lines:
        # From the prefix, npx runs the Inspector installed there instead of fetching it.
        answer = json.loads(world.sh(line, cwd=world.prefix))
        if "tools/list" in line:
            names = {tool["name"] for tool in answer["tools"]}
            assert {"bash", "shell_open", "shell_run"} <= names, line
        else:
            assert answer["content"][0]["text"] == kernel, line
            assert answer["structuredContent"]["kind"] == "foreground"
    # A wrong token is refused, so the HTTP lines above passed because of the token.
    bad = subprocess.run(
        ["bash", "-c", lines[2].replace(world.token, "not-the-token")],
        cwd=world.prefix,
        env=world.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # (A 401 makes the Inspector fall back to OAuth, which it cannot start without a terminal.)
    assert bad.returncode != 0 and '"code":"auth_required"' in bad.stderr, bad.stderr


def test_every_sh_line_is_one_command_a_shell_runs_as_written() -> None:
    for key in ("claude-code", "gemini", "inspector"):
        for line in readme_blocks()[key].text.splitlines():
            assert shlex.split(line)[0] in ("claude", "gemini", "npx"), line
