"""Ready-to-paste configuration for each MCP client, over stdio and over HTTP with the token.

Invariant: this module is the one source of every client configuration tether shows. ``tether
serve`` prints these blocks with the absolute path of the running ``tether``, its URL and its
token; the README shows the very same blocks rendered with the placeholders below (a test renders
them and compares), and ``make test-clients`` runs the README's blocks through the real clients.

A stdio entry launches ``tether mcp`` by absolute path: clients start servers without the user's
shell, so a bare ``tether`` works only where it is on the client's own PATH. ``env`` carries
``TETHER_HOME`` when it was set explicitly, so a stdio conversation shares the HTTP server's state.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

# What the README's blocks are rendered with; the reader substitutes their own values (or copies
# the blocks that ``tether serve`` prints, where they already are).
PLACEHOLDER_COMMAND: Final = ("/path/to/tether",)
PLACEHOLDER_URL: Final = "http://127.0.0.1:8765/mcp"
PLACEHOLDER_TOKEN: Final = "YOUR-TOKEN"
INSPECTOR: Final = "@modelcontextprotocol/inspector@2.12.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """How a client reaches tether: the stdio command line, and the HTTP URL with its token."""

    command: tuple[str, ...]  # argv that starts tether (``mcp`` is appended)
    url: str
    token: str
    env: Mapping[str, str] = field(default_factory=dict)  # for the stdio server

    @property
    def header(self) -> str:
        return f"Authorization: Bearer {self.token}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientBlock:
    """One block to paste: ``lang`` is ``sh`` (commands to run), ``json`` or ``toml`` (a file)."""

    key: str  # stable id, also the README marker <!-- client: KEY -->
    title: str
    where: str  # where the text goes
    lang: str
    text: str


def tether_command() -> tuple[str, ...]:
    """The absolute argv of the running tether: its script, else ``python -m tether``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "tether" and argv0.is_file():
        return (str(argv0.absolute()),)
    found = shutil.which("tether")
    if found:
        return (str(Path(found).absolute()),)
    return (sys.executable, "-m", "tether")


def explicit_env() -> dict[str, str]:
    home = os.environ.get("TETHER_HOME")
    return {"TETHER_HOME": str(Path(home).expanduser().absolute())} if home else {}


def placeholder_endpoint() -> Endpoint:
    return Endpoint(command=PLACEHOLDER_COMMAND, url=PLACEHOLDER_URL, token=PLACEHOLDER_TOKEN)


def _sh(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(part) for part in argv)


def _json(value: Any, indent: str = "") -> str:
    """JSON with one key per line and short lists on one line, as people write client configs."""
    if isinstance(value, dict) and value:
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k)}: {_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    return json.dumps(value)


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a TOML basic string


def _stdio_entry(ep: Endpoint, *, typed: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "stdio"} if typed else {}
    entry |= {"command": ep.command[0], "args": [*ep.command[1:], "mcp"]}
    if ep.env:
        entry["env"] = dict(ep.env)
    return entry


def _env_flags(flag: str, ep: Endpoint) -> list[str]:
    return [part for name, value in ep.env.items() for part in (flag, f"{name}={value}")]


def claude_code(ep: Endpoint) -> ClientBlock:
    # -e takes several values: it must follow the name, or it swallows it.
    stdio = ["claude", "mcp", "add", "--scope", "user", "tether", *_env_flags("-e", ep), "--", *ep.command]
    http = ["claude", "mcp", "add", "--scope", "user", "--transport", "http", "tether-http", ep.url]
    return ClientBlock(
        key="claude-code",
        title="Claude Code",
        where="run in a shell; check with `claude mcp list`",
        lang="sh",
        text=f"{_sh([*stdio, 'mcp'])}\n{_sh([*http, '--header', ep.header])}",
    )


def codex(ep: Endpoint) -> ClientBlock:
    lines = ["[mcp_servers.tether]", f"command = {_toml_string(ep.command[0])}"]
    lines.append("args = [" + ", ".join(_toml_string(a) for a in [*ep.command[1:], "mcp"]) + "]")
    if ep.env:
        pairs = ", ".join(f"{name} = {_toml_string(value)}" for name, value in ep.env.items())
        lines.append(f"env = {{ {pairs} }}")
    lines += [
        "",
        "[mcp_servers.tether-http]",
        f"url = {_toml_string(ep.url)}",
        f"http_headers = {{ Authorization = {_toml_string('Bearer ' + ep.token)} }}",
    ]
    return ClientBlock(
        key="codex",
        title="Codex CLI",
        where="append to ~/.codex/config.toml; check with `codex mcp list`",
        lang="toml",
        text="\n".join(lines),
    )


def gemini(ep: Endpoint) -> ClientBlock:
    stdio = ["gemini", "mcp", "add", "--scope", "user", *_env_flags("-e", ep), "tether", *ep.command, "mcp"]
    http = ["gemini", "mcp", "add", "--scope", "user", "--transport", "http", "tether-http", ep.url]
    return ClientBlock(
        key="gemini",
        title="Gemini CLI",
        where="run in a shell; check with `gemini mcp list` in a folder you trust",
        lang="sh",
        text=f"{_sh(stdio)}\n{_sh([*http, '--header', ep.header])}",
    )


def claude_desktop(ep: Endpoint) -> ClientBlock:
    return ClientBlock(
        key="claude-desktop",
        title="Claude Desktop",
        where="claude_desktop_config.json (Settings → Developer → Edit Config); stdio only",
        lang="json",
        text=_json({"mcpServers": {"tether": _stdio_entry(ep)}}),
    )


def cursor(ep: Endpoint) -> ClientBlock:
    http = {"url": ep.url, "headers": {"Authorization": f"Bearer {ep.token}"}}
    return ClientBlock(
        key="cursor",
        title="Cursor",
        where="~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
        lang="json",
        text=_json({"mcpServers": {"tether": _stdio_entry(ep), "tether-http": http}}),
    )


def vscode(ep: Endpoint) -> ClientBlock:
    http = {"type": "http", "url": ep.url, "headers": {"Authorization": f"Bearer {ep.token}"}}
    return ClientBlock(
        key="vscode",
        title="VS Code",
        where=".vscode/mcp.json in a workspace (or MCP: Open User Configuration)",
        lang="json",
        text=_json({"servers": {"tether": _stdio_entry(ep, typed=True), "tether-http": http}}),
    )


def inspector(ep: Endpoint) -> ClientBlock:
    npx = ["npx", "-y", INSPECTOR, "--cli"]
    env = [part for name, value in ep.env.items() for part in ("-e", f"{name}={value}")]
    call = ["--method", "tools/call", "--tool-name", "bash"]
    call += ["--tool-arg", "command=uname -a", "--tool-arg", "description=show the kernel"]
    lines = [
        _sh([*npx, *env, *ep.command, "mcp", "--method", "tools/list"]),
        _sh([*npx, *env, *ep.command, "mcp", *call]),
        _sh([*npx, ep.url, "--header", ep.header, "--method", "tools/list"]),
        _sh([*npx, ep.url, "--header", ep.header, *call]),
    ]
    return ClientBlock(
        key="inspector",
        title="MCP Inspector (CLI)",
        where="run in a shell: list the tools and call one, over stdio and over HTTP",
        lang="sh",
        text="\n".join(lines),
    )


def client_blocks(ep: Endpoint) -> list[ClientBlock]:
    """Every client, in the order the README and ``tether serve`` show them."""
    return [claude_code(ep), codex(ep), gemini(ep), claude_desktop(ep), cursor(ep), vscode(ep), inspector(ep)]


def banner_text(ep: Endpoint) -> str:
    """The client section of the ``tether serve`` banner: each block under its title."""
    parts = []
    for block in client_blocks(ep):
        parts.append(f"{block.title} — {block.where}:\n{block.text}\n")
    return "\n".join(parts).rstrip("\n")
