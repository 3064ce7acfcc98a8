"""Conversation ids: who owns the shells an MCP session opens.

Invariant: an id is either given (``TETHER_CONVERSATION`` on stdio, so a restarted client keeps
its shells) and then matches ``CONVERSATION_ID``, or it is ``conv-`` + 64 random bits. Standard
library only: ``tether mcp`` checks the variable before anything heavy is imported.
"""

from __future__ import annotations

import os
import re
from typing import Final

from tether.errors import UsageError

CONVERSATION_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def new_conversation_id() -> str:
    return "conv-" + os.urandom(8).hex()  # what secrets.token_hex does, without importing random


def conversation_id(value: str, *, name: str = "TETHER_CONVERSATION") -> str:
    """``value`` if it is a valid conversation id, else a fresh one when it is empty; ``name`` is
    where the value came from, as the error names it."""
    value = value.strip()
    if not value:
        return new_conversation_id()
    if not CONVERSATION_ID.match(value):
        raise UsageError(
            f"{name}={value[:40]!r} is not a valid conversation id; use 1-128 characters "
            "from A-Z a-z 0-9 . _ : - starting with a letter or digit"
        )
    return value
