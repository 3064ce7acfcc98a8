"""A store that cannot be opened or read under the tool-call middleware: ``ConversationNotes``'s
label for people never costs the call it came with, and ``AuditMiddleware`` never shows or logs
what it could not mask."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tether.audit import query
from tether.errors import StorageError
from tether.shells import SecretRedactor
from tether.tools.audited import AuditMiddleware
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


async def test_a_vault_that_becomes_unreadable_while_a_call_runs_withholds_its_result(tmp_path: Path) -> None:
    """The store went away between the check before the handler and the masker after it (a disk
    that filled meanwhile): the result cannot be masked, so it is withheld, and the error says the
    call ran, so it is not repeated; the record keeps what holds no secret."""
    readable = [True]

    def vault() -> None:
        if not readable[0]:
            raise StorageError(
                f"the file system refused tether's write to {tmp_path}/tether.db (disk I/O error)"
            )

    async def run(_args: Mapping[str, Any], _ctx: CallContext) -> ToolResult:
        readable[0] = False
        return ToolResult(text="secret output")

    registry = ToolRegistry()
    registry.add(ToolDef(name="run", description="run", input_schema={"type": "object"}, handler=run))
    registry.middleware.append(AuditMiddleware(tmp_path, SecretRedactor(vault)))
    with pytest.raises(StorageError) as refused:
        await registry.call("run", {"command": "echo hi"}, CallContext(actor="conv-a"))
    assert refused.value.message.endswith(
        "(disk I/O error); the run call itself ran and ended, but its result could not be masked, so "
        "it is withheld; do not repeat it blindly: check what it did first"
    ), refused.value.message
    (record,) = query(tmp_path, days=1, limit=10)
    assert (record.outcome, record.command, record.extra["code"]) == ("error", None, "STORAGE_UNAVAILABLE")
    assert record.detail == refused.value.message
    assert "withheld" in record.extra
