"""tether.tools.people — the people-only tools: the panel's and the CLI's doors to the vault, the audit
log, the approvals queue, the shells' records and who may use the panel.

Invariant: every tool here is ``people_only`` (no MCP conversation lists or calls it), and each
call is audited at most once: by the registry's middleware with the action and the shell or secret
the tool names (``audit_fields``, never an argument's value: a secret or passphrase is used for that
one call and never leaves it), by ``Approvals.decide`` for an answer, and not at all for reading or
verifying the audit log (``audit_calls=False``). Each module states the part it owns (``admin``:
vault, audit_verify, audit_show, audit_setup_keys; ``approvals``: the questions agents put to a
person; ``shells``: manual locks, the recorded shells, timelines, outputs, recordings).

The face::

    register_people_admin_tools       vault, audit_verify, audit_show, audit_setup_keys
    register_people_approval_tools    approvals
    register_people_panel_tools       panel_people (the CLI's alone)
    register_people_shell_tools       shell_lock, shell_records, shell_timeline, …
"""

from tether.tools.people.admin import register_people_admin_tools
from tether.tools.people.approvals import register_people_approval_tools
from tether.tools.people.panel_people import register_people_panel_tools
from tether.tools.people.shells import register_people_shell_tools

__all__ = [
    "register_people_admin_tools",
    "register_people_approval_tools",
    "register_people_panel_tools",
    "register_people_shell_tools",
]
