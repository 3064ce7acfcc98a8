"""tether.tools.shells — the persistent-shell tools of spec 003, shell_open … shell_state, manage and audit.

Invariant: the handlers translate, nothing more: arguments come only from ``args`` (validated
values, never the raw JSON), text and ``structuredContent`` only from ``render`` (pure functions,
matching ``render.RESULT_SCHEMA``), shell work only from the ``tether.shells`` face. A call's
targets are resolved before anything is typed, and one unit's failure is that unit's outcome,
never the call's (``exec``). Each module states the part it owns (``tools``: the five task tools
and ``ShellTools``; ``manage``: shell_manage; ``audit``: shell_audit; ``state``: shell_state's
rows; ``subscriptions``: output pushed as MCP notifications; ``exec``: running a call's tasks;
``render``: the result shape; ``args``: the arguments, a sub-package with its own face).

The face::

    ShellTools, register_shell_tools     the persistent-shell engine of a process and its five tools
    register_shell_manage                shell_manage, on that engine's shells
    register_shell_audit                 shell_audit, reading the audit log back
"""

from tether.tools.shells.audit import register_shell_audit
from tether.tools.shells.manage import register_shell_manage
from tether.tools.shells.tools import ShellTools, register_shell_tools

__all__ = ["ShellTools", "register_shell_audit", "register_shell_manage", "register_shell_tools"]
