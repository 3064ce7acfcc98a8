"""``ConversationNotes``: the label of a conversation's client is for people, so a store that
cannot take it never costs the call it came with."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tether.tools.conversations import ConversationNotes
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult


async def test_a_store_that_cannot_open_costs_the_label_never_the_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The note's ``Store.open`` stood outside its ``try``: a ``tether.db`` that could not be opened
    (a full disk, a directory in its place) made the first call of every conversation fail with
    STORAGE_UNAVAILABLE, and every call after it, though the call needed no store. The call is now
    served and one line (no traceback) says why the label was not kept."""
    (tmp_path / "tether.db").mkdir()  # something in the database's place: it cannot open

    async def echo(_args: Mapping[str, Any], _ctx: CallContext) -> ToolResult:
        return ToolResult(text="served")

    registry = ToolRegistry()
    registry.add(ToolDef(name="echo", description="echo", input_schema={"type": "object"}, handler=echo))
    notes = ConversationNotes(tmp_path)
    registry.middleware.append(notes)
    ctx = CallContext(actor="conv-a", client="claude-code 2.1", source="tool")
    with caplog.at_level(logging.WARNING, logger="tether.tools.conversations"):
        for _ in range(2):
            assert (await registry.call("echo", {}, ctx)).text == "served"
    await notes.aclose()
    (record, *_) = caplog.records
    assert record.getMessage().startswith(f"could not note the client of conv-a: {tmp_path}/tether.db ")
    assert record.exc_info is None
