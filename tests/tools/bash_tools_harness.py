"""Build bash-tool registries in each configuration and talk to them through the official SDK client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, serving, text_of

from tether.jobs.registry import JobRegistry
from tether.mcp.server import McpFrontDoor
from tether.shell.local import LocalBashExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.types import (
    ConfinedLaunch,
    ShellConfinement,
    ShellExecSpec,
    ShellSandboxDenial,
    ShellSandboxInfo,
)
from tether.tools.bash import ShellToolOptions, ShellToolPlugin
from tether.tools.job_tools import register_job_tools
from tether.tools.registry import ToolRegistry

__all__ = ["Setup", "connected", "make_setup", "text_of"]

ESCALATION_HINT = "retry with sandbox_permissions='full-access' and a justification"


class FakeConfinement(ShellConfinement):
    """A test double that confines nothing but reports a denial when the command says so."""

    name = "fake-sandbox"

    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch:
        async def report(stderr_tail: str) -> ShellSandboxInfo:
            denials = ()
            if "DENY " in stderr_tail:
                target = stderr_tail.split("DENY ", 1)[1].split()[0]
                denials = (ShellSandboxDenial(kind="write", target=target),)
            return ShellSandboxInfo(
                provider="fake",
                permissions="workspace-write",
                denials=denials,
                escalation_hint=ESCALATION_HINT,
            )

        return ConfinedLaunch(argv=tuple(argv), report=report)


@dataclass
class Setup:
    registry: ToolRegistry
    plugin: ShellToolPlugin
    jobs: JobRegistry | None


def make_setup(
    home: Path,
    *,
    jobs: bool = True,
    background: bool = True,
    promote: bool = True,
    confining: bool = False,
    max_live: int = 16,
    max_output_bytes: int = 64_000,
    max_spill_bytes: int = 1 << 20,
    max_timeout_ms: int = 600_000,
    grace_ms: int = 500,
) -> Setup:
    options = LocalShellOptions(
        cwd=str(home),
        max_timeout_ms=max_timeout_ms,
        spill_dir=home / "spill",
        grace_ms=grace_ms,
        max_output_bytes=max_output_bytes,
        max_spill_bytes=max_spill_bytes,
    )
    executor = LocalBashExecutor(options, confinement=FakeConfinement() if confining else None)
    if confining:
        executor.default_permissions = "workspace-write"  # type: ignore[attr-defined]
    registry = ToolRegistry()
    plugin = ShellToolPlugin(
        shell="bash",
        executor=executor,
        tools=registry,
        options=ShellToolOptions(enable_run_in_background=background, promote_on_timeout=promote),
        grace_ms=grace_ms,
        max_timeout_ms=max_timeout_ms,
    )
    table = JobRegistry(max_live=max_live) if jobs else None
    plugin.set_job_registry(table)
    if table is not None:
        register_job_tools(registry, table)
    return Setup(registry=registry, plugin=plugin, jobs=table)


@asynccontextmanager
async def connected(
    setup: Setup, *, on_message: Callable[[IncomingMessage], None] | None = None
) -> AsyncIterator[Client]:
    front = McpFrontDoor(setup.registry)
    try:
        async with serving(front) as url, http_client(url, on_message=on_message) as client:
            yield client
    finally:
        if setup.jobs is not None:
            with anyio.CancelScope(shield=True):
                await setup.jobs.close()


async def call(client: Client, arguments: dict[str, Any], tool: str = "bash") -> types.CallToolResult:
    return await client.call_tool(tool, arguments)
