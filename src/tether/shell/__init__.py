"""The one-shot executor seam of spec 000: request → spec → execution → result.

Use ``LocalBashExecutor`` / ``LocalPwshExecutor`` (``tether.shell.local``) with
``LocalShellOptions``; the public vocabulary lives in ``tether.shell.types``; the model-visible
text of a result is ``tether.shell.render.render_shell_result``. ``confine_interactive`` builds the
bubblewrap command line of a long-lived interactive process (a persistent shell's pane) under the
one-shot sandbox policy; the sandbox itself (the confined executor, the escalation gate, the
policy) is the sub-package ``tether.shell.sandbox``.

The sandbox's names are loaded on first use: an unconfined command (``tether exec`` by default)
never imports bubblewrap's policy, which costs about as much start-up as the executor itself. So
are the value types such a command never builds (``tether.shell.late_types``).
"""

from typing import TYPE_CHECKING

from tether.shell.env_registry import ShellEnvContext, ShellEnvError, ShellEnvRegistry
from tether.shell.firstuse import first_use
from tether.shell.local import LocalBashExecutor, LocalPwshExecutor, LocalShellExecutor
from tether.shell.options import LocalShellOptions, discover_pwsh
from tether.shell.render import footer_lines, render_shell_result, sandbox_lines
from tether.shell.types import (
    AbortSignal,
    DoneSignal,
    ShellAborted,
    ShellCollectedOutput,
    ShellConfinement,
    ShellException,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
    ShellExecutor,
    ShellExpiryPolicy,
    ShellProcessStatus,
    ShellRunResult,
)

_FROM_SANDBOX = frozenset(
    {
        "DEFAULT_MODE",
        "MODE_SUMMARIES",
        "PERMISSION_MODES",
        "ConfinedShell",
        "ExtraBind",
        "PermissionMode",
        "SandboxSettings",
        "confine_interactive",
        "ensure_sandbox_usable",
        "mark_path",
        "sweep_placeholders",
    }
)

# Value types a plain run of an unconfined command never builds (``tether.shell.late_types``).
_LATE_TYPES = frozenset(
    {
        "ConfinedLaunch",
        "ProfileContext",
        "ShellEnvContributor",
        "ShellEnvVariable",
        "ShellProcessRead",
        "ShellSandboxDenial",
        "ShellSandboxInfo",
    }
)

if TYPE_CHECKING:
    from tether.shell.late_types import (
        ConfinedLaunch,
        ProfileContext,
        ShellEnvContributor,
        ShellEnvVariable,
        ShellProcessRead,
        ShellSandboxDenial,
        ShellSandboxInfo,
    )
    from tether.shell.sandbox import (
        DEFAULT_MODE,
        MODE_SUMMARIES,
        PERMISSION_MODES,
        ConfinedShell,
        ExtraBind,
        PermissionMode,
        SandboxSettings,
        confine_interactive,
        ensure_sandbox_usable,
        mark_path,
        sweep_placeholders,
    )
else:  # outside the type checker's view, so that it still refuses a name the face does not have
    __getattr__ = first_use(
        __name__, {"tether.shell.late_types": _LATE_TYPES, "tether.shell.sandbox": _FROM_SANDBOX}
    )


__all__ = [
    "DEFAULT_MODE",
    "MODE_SUMMARIES",
    "PERMISSION_MODES",
    "AbortSignal",
    "ConfinedLaunch",
    "ConfinedShell",
    "DoneSignal",
    "ExtraBind",
    "LocalBashExecutor",
    "LocalPwshExecutor",
    "LocalShellExecutor",
    "LocalShellOptions",
    "PermissionMode",
    "ProfileContext",
    "SandboxSettings",
    "ShellAborted",
    "ShellCollectedOutput",
    "ShellConfinement",
    "ShellEnvContext",
    "ShellEnvContributor",
    "ShellEnvError",
    "ShellEnvRegistry",
    "ShellEnvVariable",
    "ShellException",
    "ShellExecRequest",
    "ShellExecSpec",
    "ShellExecution",
    "ShellExecutor",
    "ShellExpiryPolicy",
    "ShellProcessRead",
    "ShellProcessStatus",
    "ShellRunResult",
    "ShellSandboxDenial",
    "ShellSandboxInfo",
    "confine_interactive",
    "discover_pwsh",
    "ensure_sandbox_usable",
    "footer_lines",
    "mark_path",
    "render_shell_result",
    "sandbox_lines",
    "sweep_placeholders",
]
