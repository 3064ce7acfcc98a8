"""tether as a Python library: the tools an agent calls, for a program (docs/library.md).

The face::

    Tether           async: ``async with Tether() as t: await t.call("bash", {...})``
    BlockingTether   the same for synchronous code and threads: ``with BlockingTether() as t: ...``
    ToolResult       what a call returns: ``text``, ``structured``, ``is_error``

Invariant: this is a front door like the MCP server, the panel and the command line — it
translates a Python call into ``ToolRegistry.call`` of the same tools and adds no behaviour.
"""

from __future__ import annotations

import logging

from tether.library.blocking import BlockingTether
from tether.library.session import Tether
from tether.tools.registry import ToolResult

__all__ = ["BlockingTether", "Tether", "ToolResult"]

# A library prints nothing of its own on the program's stderr: what tether logs (the traceback of
# an INTERNAL error, a warning) goes where the program's logging configuration sends it, and
# nowhere when it has none (without a handler, Python's last resort writes WARNING and above to
# stderr). The error itself is raised either way, with its cause.
logging.getLogger("tether").addHandler(logging.NullHandler())
