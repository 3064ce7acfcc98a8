"""Choosing the executor a deployment configured (``[shell].provider``).

Invariant: one name of ``tether.config.PROVIDERS`` → one factory; front doors never construct
providers by hand. The configuration refuses any other name when it is read, so every door
refuses to start on it (a mistyped ``"sandbox"`` never runs commands unconfined).
"""

from __future__ import annotations

from collections.abc import Callable

from tether.config import Config
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


def executor_from_config(
    config: Config,
    *,
    options: LocalShellOptions | None = None,
    env_registry: ShellEnvRegistry | None = None,
    keep_background: bool = False,
) -> ShellExecutor:
    """The executor named by ``[shell].provider``."""
    factory = _PROVIDERS[config.shell.provider]
    opts = options or LocalShellOptions.from_config(config)
    registry = env_registry or ShellEnvRegistry(home=config.home)
    return factory(config, opts, registry, keep_background)
