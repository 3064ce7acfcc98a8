"""tether.cli.door — how a ``tether`` command acts: through the tools, in this home's tools process.

The face (what the command line's actions use)::

    call_tool(name, arguments)    one audited call as actor and source ``cli``
    tools_session(home=None)      a connection for several calls (``DoorTools.call``; ``audited=False``
                                  only for what a command reads to ask its own question)
    Answer                        a tool's text, structured content and error flag
    stop_door(home)               end the tools process of a home (its pid), e.g. after tests

Invariant: the command line holds no second path to the store or the audit log for what a tool does
(locks, the vault, listings, the audit log, timelines, recordings): each action is one
``ToolRegistry.call`` with ``CallContext(actor="cli", source="cli")`` in the tools process
(``tether.cli.door.server``), checked, masked and audited exactly as the panel's and an agent's
calls are. Importing this face loads the standard library only.
"""

from tether.cli.door.client import Answer, DoorTools, call_tool, stop_door, tools_session

__all__ = ["Answer", "DoorTools", "call_tool", "stop_door", "tools_session"]
