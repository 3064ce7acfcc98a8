"""tether.tools.shells.args — the persistent-shell tools' arguments: parsed, validated, described.

Invariant: the only way from a tool call's raw JSON to the validated values of ``model`` is
through ``parse_call`` (or the per-tool ``parse_*`` wrappers and ``parse_state``): every rule of
spec 003 §1 holds for what comes out, and every violation is a ``UsageError`` whose message starts
with the field's path (``tasks[2].wait.timeoutMs``); budgets are clamped and say so, every other
out-of-range value is refused. ``input_schema`` describes exactly what the parser accepts. Each
module states the part it owns (``parse``: a call and its tasks; ``fields``: typed reads of one
object; ``blocks``: target, wait, output, safety; ``actions`` and ``steps``: each kind's payload;
``regex``: JavaScript patterns on ``re``; ``model``: the values; ``schema`` and
``schema_actions``: the JSON Schemas).

The face::

    TOOLS, parse_call, parse_open, parse_run,     the seven tools' names and their parsers
      parse_send, parse_read, parse_manage,
      parse_audit, parse_state
    input_schema(tool)                            a fresh copy of a tool's ``inputSchema``
    named_in(arguments)                           the shell ids raw arguments name (a hint)
    Call, Task, OpenAction, RunAction, ...        the validated values the handlers consume
"""

from tether.tools.shells.args.blocks import named_in
from tether.tools.shells.args.model import (
    AuditAction,
    Call,
    ManageAction,
    OpenAction,
    ReadAction,
    RetryAction,
    RunAction,
    SendAction,
    StepsAction,
    SubscribeAction,
    Task,
)
from tether.tools.shells.args.parse import (
    TOOLS,
    input_schema,
    parse_audit,
    parse_call,
    parse_manage,
    parse_open,
    parse_read,
    parse_run,
    parse_send,
    parse_state,
)

__all__ = [
    "TOOLS",
    "AuditAction",
    "Call",
    "ManageAction",
    "OpenAction",
    "ReadAction",
    "RetryAction",
    "RunAction",
    "SendAction",
    "StepsAction",
    "SubscribeAction",
    "Task",
    "input_schema",
    "named_in",
    "parse_audit",
    "parse_call",
    "parse_manage",
    "parse_open",
    "parse_read",
    "parse_run",
    "parse_send",
    "parse_state",
]
