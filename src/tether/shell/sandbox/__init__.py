"""tether.shell.sandbox — confinement with bubblewrap: one-shot commands and persistent shells' panes.

Invariant: a command runs inside the sandbox its policy describes (built only from a ``[sandbox]``
table that validated completely), or unconfined because its request carried ``require_escalated``
with a justification that the configuration or a person granted, audited before it ran — never
unconfined by accident. Inside, persistence paths and the control files of existing repositories
are read-only, and whatever git directory, control file or replaced symlink a command leaves under
its writable roots is neutralised before its result returns. Each module states the part it owns
(``policy``, ``bwrap``, ``seccomp``, ``grants``, ``repos``, ``git``, ``denials`` …).

The face::

    sandbox_executor(config, shell=…)     the confined one-shot executor (``SandboxBashExecutor``,
                                          ``SandboxPwshExecutor``), or a refusal saying the fix
    with_sandbox(config)                  ``config`` with ``[shell].provider = "sandbox"`` (``--sandbox``)
    EscalationGate                        grants a wider mode: the configuration, else a person
    SandboxSettings                       the ``[sandbox]`` table, validated
    PermissionMode, PERMISSION_MODES,     the modes, narrow → wide, and their one-line summaries
      DEFAULT_MODE, MODE_SUMMARIES
    confine_interactive, ConfinedShell    a persistent shell's pane under the one-shot policy
    ExtraBind, mark_path                  a pane's extra bind; the path its prompt hook marks
    sweep_placeholders                    removes the placeholders that dead sandboxes left
    ensure_sandbox_usable                 returns once bubblewrap built a sandbox here, or refuses
                                          saying what forbids it (``usable``)

The executor and the gate are loaded on first use: they bring the approvals queue and the audit
log (sqlite3 among them), which importing ``tether.shell`` never did.
"""

from typing import TYPE_CHECKING

from tether.shell.sandbox.bwrap import ExtraBind
from tether.shell.sandbox.collect import mark_path
from tether.shell.sandbox.interactive import ConfinedShell, confine_interactive
from tether.shell.sandbox.placeholders import sweep_stale as sweep_placeholders
from tether.shell.sandbox.policy import (
    DEFAULT_MODE,
    MODE_SUMMARIES,
    PERMISSION_MODES,
    PermissionMode,
    SandboxSettings,
)
from tether.shell.sandbox.usable import ensure_usable as ensure_sandbox_usable

_FROM_EXECUTOR = frozenset({"SandboxBashExecutor", "SandboxPwshExecutor", "sandbox_executor", "with_sandbox"})

if TYPE_CHECKING:
    from tether.shell.sandbox.executor import (
        SandboxBashExecutor,
        SandboxPwshExecutor,
        sandbox_executor,
        with_sandbox,
    )
    from tether.shell.sandbox.grants import EscalationGate
else:
    # Outside the type checker's view, so that it still refuses a name the face does not have.
    def __getattr__(name: str) -> object:
        """The deferred names (PEP 562): the executor and the gate are imported on first use."""
        if name == "EscalationGate":
            from tether.shell.sandbox import grants

            value = grants.EscalationGate
        elif name in _FROM_EXECUTOR:
            from tether.shell.sandbox import executor

            value = getattr(executor, name)
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


__all__ = [
    "DEFAULT_MODE",
    "MODE_SUMMARIES",
    "PERMISSION_MODES",
    "ConfinedShell",
    "EscalationGate",
    "ExtraBind",
    "PermissionMode",
    "SandboxBashExecutor",
    "SandboxPwshExecutor",
    "SandboxSettings",
    "confine_interactive",
    "ensure_sandbox_usable",
    "mark_path",
    "sandbox_executor",
    "sweep_placeholders",
    "with_sandbox",
]
