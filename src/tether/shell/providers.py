"""Choosing the executor a deployment configured (``[shell].provider``).

Invariant: one name → one factory; front doors never construct providers by hand, so a provider
added later (the bubblewrap sandbox registers ``"sandbox"``) is picked up by every door at once.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.config import Config
from tether.errors import UsageError
from tether.shell.env_registry import ShellEnvRegistry
from tether.shell.local import LocalBashExecutor, LocalPwshExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.types import ShellExecutor

# factory(config, options, env_registry, keep_background) -> executor
ProviderFactory = Callable[[Config, LocalShellOptions, ShellEnvRegistry, bool], ShellExecutor]


def _sandbox(
    config: Config, options: LocalShellOptions, env_registry: ShellEnvRegistry, keep_background: bool
) -> ShellExecutor:
    # Imported when chosen: bubblewrap's policy, the approvals queue and the audit log cost more
    # start-up than the rest of the executor, and a bash or pwsh executor (`tether exec` by
    # default) never needs them.
    from tether.shell.sandbox import sandbox_executor

    return sandbox_executor(
        config, options=options, env_registry=env_registry, keep_background=keep_background
    )


_PROVIDERS: dict[str, ProviderFactory] = {
    "bash": lambda _c, o, r, k: LocalBashExecutor(o, env_registry=r, keep_background=k),
    "pwsh": lambda _c, o, r, k: LocalPwshExecutor(o, env_registry=r, keep_background=k),
    "sandbox": _sandbox,
}


def register_provider(name: str, factory: ProviderFactory) -> None:
    _PROVIDERS[name] = factory


def provider_names() -> list[str]:
    return sorted(_PROVIDERS)


def executor_from_config(
    config: Config,
    *,
    options: LocalShellOptions | None = None,
    env_registry: ShellEnvRegistry | None = None,
    keep_background: bool = False,
) -> ShellExecutor:
    """The executor named by ``[shell].provider`` (bash, pwsh, or a registered provider)."""
    name = config.shell.provider
    factory = _PROVIDERS.get(name)
    if factory is None:
        raise UsageError(
            f"config.toml: [shell].provider = {name!r} is not available; "
            f"choose one of: {', '.join(provider_names())}"
        )
    opts = options or LocalShellOptions.from_config(config)
    registry = env_registry or ShellEnvRegistry(home=config.home)
    return factory(config, opts, registry, keep_background)
