"""Driving ``tether mcp [--sandbox]`` as an attacker would: a real server over stdio, the official
SDK client, a user home that is also the working directory, and credentials planted in the
server's environment only (never in the test process's own)."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters

TETHER = str(Path(sys.executable).parent / "tether")

# Names as a red team plants them: every one of them is scrubbed from children by default.
CREDENTIAL_NAMES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
    "GITLAB_TOKEN", "NPM_TOKEN", "PYPI_API_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN",
    "SLACK_BOT_TOKEN", "STRIPE_SECRET_KEY", "TWILIO_AUTH_TOKEN", "SENDGRID_API_KEY", "MYSQL_PWD",
    "MYSQL_PASSWORD", "PGPASSWORD", "POSTGRES_PASSWORD", "REDIS_PASS", "SMTP_PASSWORD",
    "LDAP_BIND_PASSWD", "DOCKER_PASSWORD", "DOCKER_AUTH_CONFIG", "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_CONNECTION_STRING", "GOOGLE_APPLICATION_CREDENTIALS", "GCP_SERVICE_ACCOUNT_KEY",
    "DIGITALOCEAN_ACCESS_TOKEN", "HEROKU_API_KEY", "VAULT_TOKEN", "CONSUL_HTTP_TOKEN",
    "SENTRY_AUTH_TOKEN", "JWT_SECRET", "SESSION_SECRET", "SECRET_KEY_BASE", "DJANGO_SECRET_KEY",
    "ENCRYPTION_KEY", "SSH_PRIVATE_KEY", "GPG_PASSPHRASE", "CODECOV_TOKEN", "CLOUDFLARE_API_TOKEN",
    "DATADOG_API_KEY", "BASIC_AUTH", "GITHUB_PAT",
)  # fmt: skip
# Credentials carried in the value (a URL with a password) or in a DSN name.
CREDENTIAL_URLS = {
    "DATABASE_URL": "postgres://app:{secret}@db.internal:5432/app",
    "REDIS_URL": "redis://:{secret}@127.0.0.1:6379/0",
    "MONGODB_URI": "mongodb+srv://svc:{secret}@cluster0.example.net/db",
    "HTTPS_PROXY": "http://me:{secret}@proxy.internal:3128",
    "SENTRY_DSN": "https://{secret}@o1.ingest.sentry.io/42",
}
PLAIN_NAME = "TETHER_TEST_PLAIN"  # not a credential: it must stay visible (proof the reads work)


def plant() -> tuple[dict[str, str], list[str]]:
    """(environment additions, the secret values that must never be seen)."""
    env: dict[str, str] = {}
    secret_values: list[str] = []
    for name in CREDENTIAL_NAMES:
        value = f"planted{secrets.token_hex(8)}"
        env[name] = value
        secret_values.append(value)
    for name, template in CREDENTIAL_URLS.items():
        value = f"planted{secrets.token_hex(8)}"
        env[name] = template.format(secret=value)
        secret_values.append(value)
    env[PLAIN_NAME] = f"visible{secrets.token_hex(4)}"
    assert len(secret_values) >= 40
    return env, secret_values


def params(
    tether_home: Path, home: Path, *args: str, extra_env: dict[str, str] | None = None
) -> StdioServerParameters:
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": f"{home}/tools/bin:{os.environ['PATH']}",
        "HOME": str(home),
        "TETHER_CONVERSATION": "red-team",
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        **(extra_env or {}),
    }
    return StdioServerParameters(command=TETHER, args=["mcp", *args], env=env, cwd=str(home))


@asynccontextmanager
async def server(
    tether_home: Path, home: Path, *args: str, extra_env: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    async with Client(params(tether_home, home, *args, extra_env=extra_env)) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def bash(client: Client, command: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    """One ``bash`` call that must come back in the foreground (never promoted to a job)."""
    result = await client.call_tool("bash", {"command": command, "description": "red team", **extra})
    text = text_of(result)
    assert not result.is_error, text
    data = dict(result.structured_content or {})
    assert data.get("kind") == "foreground", text
    return text, data


def denials(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["kind"], d["target"]) for d in data["sandbox"]["denials"]]


def link_hooks(repo: Path) -> Path:
    """``repo/.git/hooks -> ../.githooks`` (a common set-up: hooks kept in the work tree); the
    hooks directory the link names."""
    target = repo / ".githooks"
    target.mkdir()
    hooks = repo / ".git" / "hooks"
    for entry in hooks.iterdir():
        entry.unlink()
    hooks.rmdir()
    hooks.symlink_to("../.githooks")
    return target


def tree(root: Path, *, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every path under ``root`` with its content (files), link target or kind: a before/after view."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in skip]
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                seen[str(path)] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                seen[str(path)] = "dir"
            else:
                seen[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return seen


def tether_processes(tether_home: Path) -> list[int]:
    """Every process started for this TETHER_HOME (server, tmux server and client, shells)."""
    marker = f"TETHER_HOME={tether_home}".encode()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry))
    return found


def environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


async def shell_command(client: Client, command: str) -> dict[str, Any]:
    """Open a persistent shell and run ``command`` in it to its exit (``shell_open`` + ``shell_run``)."""
    opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
    shell = (opened.structured_content or {})["tasks"][0]["shell"]
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": command},
        "wait": {"kind": "exit"},
    }
    result = await client.call_tool("shell_run", {"tasks": [task]})
    out: dict[str, Any] = (result.structured_content or {})["tasks"][0]
    return out


async def open_task(client: Client, **action: Any) -> dict[str, Any]:
    """``shell_open`` of one shell (``action``'s fields); its task, checked ok."""
    opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", **action}}]})
    task: dict[str, Any] = (opened.structured_content or {})["tasks"][0]
    assert task["ok"], task
    return task


async def run_to_exit(
    client: Client, shell: str, command: str, *, past_guard: bool = False
) -> dict[str, Any]:
    """``shell_run`` of ``command`` in ``shell`` to its exit; the task, checked met (it came back at
    the command's exit, never by a timeout). ``past_guard``: the guard is a speed bump, so the
    attacker steps past it and the sandbox alone must hold."""
    task: dict[str, Any] = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": command},
        "wait": {"kind": "exit"},
    }
    if past_guard:
        task["safety"] = {"bypassGuard": True, "reason": "red team: the sandbox alone must hold"}
    result = await client.call_tool("shell_run", {"tasks": [task]})
    out: dict[str, Any] = (result.structured_content or {})["tasks"][0]
    assert out["met"] is True, json.dumps(out)
    return out
