"""How a ``tether`` command acts: through the tools layer, as actor and source ``cli``.

Invariant: the CLI holds no second path to the store or the audit log for what a tool does
(locks, the vault, listing, the audit log, timelines, recordings): each action is one
``ToolRegistry.call`` with ``CallContext(actor="cli", source="cli")`` on the tools
``build_catalog`` assembles, so it is checked, masked and audited exactly as the panel's and an
agent's calls are (once, by the registry's middleware). ``audited=False`` only for what a command
reads to ask its own question (is this vault group locked, before prompting for its passphrase).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from tether.config import Config, load_config
from tether.tools.catalog import ToolCatalog, build_catalog
from tether.tools.registry import CallContext, ToolResult

CLI_CONTEXT = CallContext(actor="cli", source="cli")
T = TypeVar("T")


class CliTools:
    """The tools of one CLI invocation."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self._catalog = catalog

    @property
    def config(self) -> Config:
        return self._catalog.config

    async def call(self, name: str, arguments: Mapping[str, Any], *, audited: bool = True) -> ToolResult:
        return await self._catalog.registry.call(name, arguments, CLI_CONTEXT, audited=audited)


def with_tools(work: Callable[[CliTools], Awaitable[T]]) -> T:
    """Run ``work`` with this home's tools on a fresh event loop; everything they started (the
    shells' control client and log watcher) is closed before this returns."""

    async def main() -> T:
        catalog = build_catalog(load_config(), with_jobs=False)
        try:
            return await work(CliTools(catalog))
        finally:
            with anyio.CancelScope(shield=True):
                await catalog.aclose()

    return anyio.run(main)


def call_tool(name: str, arguments: Mapping[str, Any]) -> ToolResult:
    """One audited tool call as ``cli``."""

    async def one(tools: CliTools) -> ToolResult:
        return await tools.call(name, arguments)

    return with_tools(one)
