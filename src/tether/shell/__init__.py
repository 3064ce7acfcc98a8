"""The one-shot executor seam of spec 000: request → spec → execution → result.

Use ``LocalBashExecutor`` / ``LocalPwshExecutor`` (``tether.shell.local``) with
``LocalShellOptions``; the public vocabulary lives in ``tether.shell.types``; the model-visible
text of a result is ``tether.shell.render.render_shell_result``. ``confine_interactive`` builds the
bubblewrap command line of a long-lived interactive process (a persistent shell's pane) under the
one-shot sandbox policy.
"""

from tether.shell.env_registry import (
    ProfileContext,
    ShellEnvContext,
    ShellEnvContributor,
    ShellEnvError,
    ShellEnvRegistry,
    ShellEnvVariable,
)
from tether.shell.local import LocalBashExecutor, LocalPwshExecutor, LocalShellExecutor
from tether.shell.options import LocalShellOptions, discover_pwsh
from tether.shell.render import footer_lines, render_shell_result
from tether.shell.sandbox_bwrap import ExtraBind
from tether.shell.sandbox_interactive import ConfinedInteractive, confine_interactive
from tether.shell.sandbox_policy import SandboxSettings
from tether.shell.types import (
    AbortSignal,
    ConfinedLaunch,
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
    ShellProcessRead,
    ShellProcessStatus,
    ShellRunResult,
    ShellSandboxDenial,
    ShellSandboxInfo,
)

__all__ = [
    "AbortSignal",
    "ConfinedInteractive",
    "ConfinedLaunch",
    "DoneSignal",
    "ExtraBind",
    "LocalBashExecutor",
    "LocalPwshExecutor",
    "LocalShellExecutor",
    "LocalShellOptions",
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
    "footer_lines",
    "render_shell_result",
]
