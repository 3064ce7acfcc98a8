"""A ``tools/call`` read from stdio is announced to the registry before the SDK parses it
(``ToolRegistry.expect``), so the tool starts what it reads first: the shell tools that begin by
listing the live shells ask tmux then. An announcement never fails a call, and nothing but a
well-formed ``tools/call`` is announced."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tether.config import load_config
from tether.mcp.stdio import _announce
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

SCHEMA: dict[str, Any] = {"type": "object"}


async def _done(_args: Mapping[str, Any], _ctx: CallContext) -> ToolResult:
    return ToolResult(text="done")


def _registry(expected: list[str], given: list[Any] | None = None) -> ToolRegistry:
    def broken(_arguments: Any) -> None:
        raise RuntimeError("cannot prepare")

    def announced(arguments: Any) -> None:
        expected.append("a")
        if given is not None:
            given.append(arguments)

    registry = ToolRegistry()
    registry.add(ToolDef(name="a", description="a", input_schema=SCHEMA, handler=_done, expect=announced))
    registry.add(ToolDef(name="plain", description="p", input_schema=SCHEMA, handler=_done))
    registry.add(ToolDef(name="broken", description="b", input_schema=SCHEMA, handler=_done, expect=broken))
    return registry


def test_only_a_well_formed_tools_call_is_announced() -> None:
    expected: list[str] = []
    given: list[Any] = []
    registry = _registry(expected, given)
    _announce({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}, registry)
    assert expected == ["a"]
    assert given == [None]  # the arguments as they came (none here), for a hint of what is named
    tasks = {"tasks": [{"target": {"sessions": "dsh-abc123"}}]}
    _announce(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "arguments": tasks}},
        registry,
    )
    assert given == [None, tasks]
    del expected[1:]
    for item in (
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"name": "a"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 7}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": ["a"]},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call"},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "unknown"}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "plain"}},
    ):
        _announce(item, registry)
    assert expected == ["a"]


def test_a_failing_preparation_is_logged_and_the_call_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    registry = _registry([])
    registry.expect("broken")  # never raises
    assert "preparing for a broken call failed" in caplog.text


async def test_the_shell_tools_that_list_the_live_shells_first_prepare_that_listing(
    tether_home: Path,
) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        registry = catalog.registry
        preparing = {t.name for t in registry.list() if t.expect is not None}
        assert {"shell_run", "shell_send", "shell_read"} <= preparing
        assert "bash" not in preparing and "shell_open" not in preparing
    finally:
        await catalog.aclose()
