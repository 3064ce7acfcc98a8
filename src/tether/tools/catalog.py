"""The one place a tether process assembles its model-visible tools from ``Config``.

Invariant: every front door of one process (``tether mcp``, ``tether serve``) gets its tools from
``build_catalog`` and closes them with ``ToolCatalog.aclose()``; nothing else decides which tools
exist. Closing kills every job the process still runs, so no command outlives its server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from tether.config import Config
from tether.jobs.registry import JobRegistry
from tether.shell import ShellEnvRegistry
from tether.shells import SafetyPolicy
from tether.tools.audited import AuditMiddleware, MaskedResources
from tether.tools.bash import ShellName, ShellToolOptions, ShellToolPlugin, make_executor, pwsh_available
from tether.tools.conversations import ConversationNotes
from tether.tools.ending import ServerStop
from tether.tools.job_tools import register_job_tools
from tether.tools.people import (
    register_people_admin_tools,
    register_people_approval_tools,
    register_people_panel_tools,
    register_people_shell_tools,
)
from tether.tools.registry import ToolRegistry
from tether.tools.shells import ShellTools, register_shell_audit, register_shell_manage, register_shell_tools

logger = logging.getLogger(__name__)

Closer = Callable[[], Awaitable[None]]


@dataclass(slots=True, kw_only=True)
class ToolCatalog:
    """A process's tools: the registry every front door serves, plus hints and cleanup."""

    config: Config
    registry: ToolRegistry
    jobs: JobRegistry | None
    shell_plugins: dict[str, ShellToolPlugin] = field(default_factory=dict)
    # The shell-env registry of every bash/pwsh command (spec 000 "shell-env"): a plugin adds its
    # TETHER_* variables here once, and both tools' commands get them.
    env_registry: ShellEnvRegistry = field(default_factory=ShellEnvRegistry)
    # System-prompt sections ("tool:bash" → text); MCP sends them as server instructions.
    hints: dict[str, str] = field(default_factory=dict)
    closers: list[Closer] = field(default_factory=list)
    shell_tools: ShellTools | None = None
    # A stop signal the process got: every call cancelled from then on is audited as ended by it.
    stop: ServerStop = field(default_factory=ServerStop)
    _closed: anyio.Event | None = None

    def instructions(self) -> str:
        intro = (
            "tether gives you a shell. Each section below is the guidance for one tool family; "
            "follow it when you call those tools."
        )
        sections = [f"## {name}\n{text.strip()}" for name, text in self.hints.items()]
        return "\n\n".join([intro, *sections])

    def start(self) -> None:
        """A server's start (on its event loop): what runs beside its calls begins — the shells'
        sweep (idle closes, retention of closed shells), also if no call opens a shell."""
        if self.shell_tools is not None:
            self.shell_tools.start_sweeps()

    async def end_conversation(self, actor: str) -> None:
        """A conversation is over (its MCP session closed): stop the jobs only it could reach."""
        if self.jobs is not None:
            await self.jobs.kill_owned_by(actor, "the conversation ended")
        if self.shell_tools is not None:
            await self.shell_tools.end_conversation(actor)

    async def aclose(self) -> None:
        """Run the closers and kill every job. Idempotent, and every caller returns once the one
        close is done (a stop signal during a shutdown already under way waits for it)."""
        if self._closed is not None:
            await self._closed.wait()
            return
        self._closed = anyio.Event()
        try:
            for closer in reversed(self.closers):
                try:
                    await closer()
                except Exception:
                    logger.exception("closing the tool catalog failed")
            if self.jobs is not None:
                await self.jobs.close()
        finally:
            self._closed.set()


def _closer(close: Callable[[], None]) -> Closer:
    async def aclose() -> None:
        close()

    return aclose


def build_catalog(config: Config, *, with_jobs: bool = True) -> ToolCatalog:
    """Assemble the tools of one process: bash, pwsh (where it resolves), jobs, persistent shells,
    and the people-only tools the panel and the CLI act through."""
    registry = ToolRegistry()
    jobs = (
        JobRegistry(max_live=config.jobs.max_live, max_finished=config.jobs.max_finished)
        if with_jobs
        else None
    )
    catalog = ToolCatalog(
        config=config, registry=registry, jobs=jobs, env_registry=ShellEnvRegistry(home=config.home)
    )
    options = ShellToolOptions(
        enable_run_in_background=config.tools.enable_run_in_background,
        promote_on_timeout=config.tools.promote_on_timeout,
    )

    shells: list[ShellName] = ["bash"]
    if pwsh_available(config):
        shells.append("pwsh")
    for shell in shells:
        plugin = ShellToolPlugin(
            shell=shell,
            executor=make_executor(config, shell, env_registry=catalog.env_registry),
            tools=registry,
            options=options,
            default_timeout_ms=config.shell.timeout_ms,
            max_timeout_ms=config.shell.max_timeout_ms,
            grace_ms=config.shell.grace_ms,
        )
        plugin.set_job_registry(jobs)
        catalog.shell_plugins[shell] = plugin
        catalog.hints[f"tool:{shell}"] = plugin.hint
    if jobs is not None:
        register_job_tools(registry, jobs)

    # Persistent shells (spec 003).
    # Safety (spec 003 §4): every write passes the policy's hooks; every call is audited once and
    # masked by the middleware (so shell_audit does not log itself).
    policy = SafetyPolicy.from_config(config)
    catalog.closers.append(_closer(policy.close))  # first in, so closed after the shells it serves
    conversations = ConversationNotes(config.home)
    registry.middleware.append(conversations)
    registry.middleware.append(AuditMiddleware(config.home, policy.redactor, catalog.stop))
    catalog.closers.append(conversations.aclose)
    shell_tools = register_shell_tools(
        registry, config=config, hints=catalog.hints, closers=catalog.closers, hooks_for=policy.hooks_for
    )
    catalog.shell_tools = shell_tools
    registry.resources[:] = [MaskedResources(r, policy.redactor) for r in registry.resources]
    register_shell_audit(registry, home=config.home, audit_calls=False)
    register_shell_manage(registry, config=config, shells=shell_tools.shells)
    # The people's doors (panel, CLI): never listed to a model nor callable by one.
    register_people_shell_tools(registry, shells=shell_tools.shells, redactor=policy.redactor)
    register_people_admin_tools(registry, config=config, shells=shell_tools.shells)
    register_people_approval_tools(registry, config=config)
    register_people_panel_tools(registry, config=config)
    return catalog
