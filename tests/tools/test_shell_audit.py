"""``shell_audit``: filters, target selection, paging, export, self-auditing; and over ``tether mcp``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # a dependency of mcp
import pytest
from shell_harness import call, shell_client

from tether.audit import AuditLog, query, verify
from tether.errors import UsageError
from tether.tools.registry import CallContext, ToolRegistry
from tether.tools.shells.audit import AUDIT_SCHEMA, ShellAuditTool, register_shell_audit

A = "dsh-aaaaaa"
B = "dsh-bbbbbb"
DAY = 86_400.0
EVIL = 'make\n{"fake":1}'


def _seed(home: Path) -> None:
    old = AuditLog(home, clock=lambda: time.time() - 3 * DAY)
    old.append(actor="conv-a", source="tool", tool="shell_run", action="run", targets=[A], command="old")
    log = AuditLog(home)
    log.append(actor="conv-a", source="tool", tool="shell_run", action="run", targets=[A], command=EVIL)
    log.append(actor="conv-b", source="tool", tool="shell_run", action="run", targets=[A], command="ls")
    log.append(actor="conv-b", source="tool", tool="shell_run", action="run", targets=[B], command="pwd")
    log.append(actor="panel", source="panel", tool="shell", action="lock", targets=[B], reason="demo")
    log.append(actor="cli", source="cli", tool="vault", action="list")
    log.append(
        actor="conv-a",
        source="tool",
        tool="shell_manage",
        action="macro-set",
        flags=["bypass-guard"],
        reason="asked",
    )


def _tool(home: Path, **kw: Any) -> ShellAuditTool:
    return ShellAuditTool(home, owned_shells=lambda actor: [A] if actor == "conv-a" else [], **kw)


async def _one(tool: ShellAuditTool, task: dict[str, Any], actor: str = "conv-a") -> dict[str, Any]:
    result = await tool({"tasks": [task]}, CallContext(actor=actor))
    jsonschema.validate(result.structured, AUDIT_SCHEMA)
    out: dict[str, Any] = result.structured["tasks"][0]
    out["text"] = result.text
    return out


def _who(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["actor"], r["action"]) for r in out["records"]]


async def test_filters_and_targets(tether_home: Path) -> None:
    _seed(tether_home)
    tool = _tool(tether_home, audit_calls=False)
    everything = await _one(tool, {"target": {"sessions": "*"}, "action": {"kind": "audit"}})
    assert _who(everything) == [
        ("conv-a", "run"),
        ("conv-b", "run"),
        ("conv-b", "run"),
        ("panel", "lock"),
        ("cli", "list"),
        ("conv-a", "macro-set"),
    ]
    seqs = [r["seq"] for r in everything["records"]]
    assert seqs == sorted(seqs)
    out = await _one(tool, {"target": {"sessions": "*"}, "action": {"kind": "audit", "actor": "conv-b"}})
    assert _who(out) == [("conv-b", "run"), ("conv-b", "run")]
    out = await _one(tool, {"target": {"sessions": "*"}, "action": {"kind": "audit", "source": "panel"}})
    assert _who(out) == [("panel", "lock")] and out["records"][0]["reason"] == "demo"
    # Explicit ids: records naming any of them, merged in chain order.
    out = await _one(tool, {"target": {"sessions": A}, "action": {"kind": "audit"}})
    assert [r["command"] for r in out["records"]] == [EVIL, "ls"]
    out = await _one(tool, {"target": {"sessions": f"{B},{A}"}, "action": {"kind": "audit"}})
    assert [r["command"] for r in out["records"]] == [EVIL, "ls", "pwd", None]
    # mine (default): conv-a's own records plus records on conv-a's shell A by anyone.
    out = await _one(tool, {"action": {"kind": "audit"}})
    assert _who(out) == [("conv-a", "run"), ("conv-b", "run"), ("conv-a", "macro-set")]
    out = await _one(tool, {"action": {"kind": "audit", "actor": "conv-b"}})
    assert _who(out) == [("conv-b", "run")]
    out = await _one(tool, {"action": {"kind": "audit"}}, actor="conv-z")
    assert out["records"] == [] and out["text"].count("0 records") == 1


async def test_days_window_and_line_cap(tether_home: Path) -> None:
    _seed(tether_home)
    tool = _tool(tether_home, audit_calls=False)
    star = {"sessions": "*"}
    assert (await _one(tool, {"target": star, "action": {"kind": "audit", "days": 1}}))["count"] == 6
    out = await _one(tool, {"target": star, "action": {"kind": "audit", "days": 4}})
    assert out["count"] == 7 and out["records"][0]["command"] == "old"
    out = await _one(tool, {"target": star, "action": {"kind": "audit"}, "output": {"lines": 2}})
    assert _who(out) == [("cli", "list"), ("conv-a", "macro-set")]  # the newest two, newest last
    out = await _one(tool, {"target": star, "action": {"kind": "audit"}, "output": {"lines": 0}})
    assert out["count"] == 0 and out["records"] == []


async def test_text_keeps_one_record_per_line(tether_home: Path) -> None:
    _seed(tether_home)
    out = await _one(
        _tool(tether_home, audit_calls=False), {"target": {"sessions": A}, "action": {"kind": "audit"}}
    )
    lines = out["lines"]
    assert lines[0].startswith("2 records (") and lines[0].endswith("newest last")
    assert len(lines) == 3
    assert 'shell_run.run dsh-aaaaaa ok $ "make\\n{\\"fake\\":1}"' in lines[1]
    assert lines[1].split()[2] == "conv-a" and "(tool)" in lines[1]
    text = (
        await _one(
            _tool(tether_home, audit_calls=False), {"target": {"sessions": "*"}, "action": {"kind": "audit"}}
        )
    )["text"]
    assert 'reason="asked" [bypass-guard]' in text


async def test_export_is_raw_jsonl(tether_home: Path) -> None:
    _seed(tether_home)
    tool = _tool(tether_home, audit_calls=False)
    out = await _one(
        tool,
        {"target": {"sessions": "*"}, "action": {"kind": "audit", "export": True}, "output": {"lines": 3}},
    )
    stored = [
        line
        for path in sorted((tether_home / "audit").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert out["lines"] == stored[-3:]
    assert out["export"] is True and out["count"] == 3
    assert [json.loads(line)["seq"] for line in out["lines"]] == [r["seq"] for r in out["records"]]
    # The text block is the header line plus exactly those JSONL lines.
    assert out["text"].splitlines()[2:] == stored[-3:]


async def test_each_call_is_audited_after_its_query(tether_home: Path) -> None:
    _seed(tether_home)
    tool = _tool(tether_home)
    first = await _one(tool, {"target": {"sessions": "*"}, "action": {"kind": "audit", "source": "tool"}})
    assert all(r["tool"] != "shell_audit" for r in first["records"])  # a call never sees itself
    logged = query(tether_home, source="tool", limit=1)[0]
    assert (logged.actor, logged.tool, logged.action, logged.outcome) == (
        "conv-a",
        "shell_audit",
        "audit",
        "ok",
    )
    assert logged.extra["tasks"][0]["source"] == "tool"
    second = await _one(tool, {"target": {"sessions": A}, "action": {"kind": "audit"}}, actor="conv-b")
    assert second["count"] == 2
    logged = query(tether_home, actor="conv-b", limit=1)[0]
    assert logged.targets == (A,) and logged.tool == "shell_audit"
    assert verify(tether_home).ok


async def test_several_tasks_and_validation(tether_home: Path) -> None:
    _seed(tether_home)
    tool = _tool(tether_home, audit_calls=False)
    result = await tool(
        {
            "tasks": [
                {"target": {"sessions": A}, "action": {"kind": "audit"}, "label": "a"},
                {"target": {"sessions": B}, "action": {"kind": "audit"}, "label": "b"},
            ]
        },
        CallContext(actor="conv-a"),
    )
    assert [t["count"] for t in result.structured["tasks"]] == [2, 2]
    assert result.text.startswith("2 tasks: 2 ok")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tasks": [{"action": {"kind": "audit", "days": 0}}]}, "at least 1"),
        ({"tasks": [{"action": {"kind": "audit", "source": "web"}}]}, "tool, panel, host, cli"),
        ({"tasks": [{"action": {"kind": "audit"}, "wait": {"kind": "idle"}}]}, "does not take the wait"),
        ({"tasks": [{"action": {"kind": "audit"}, "output": {"lines": -1}}]}, "above 2000 is clamped"),
    ]
    for bad, message in cases:
        with pytest.raises(UsageError, match=message):
            await tool(bad, CallContext(actor="conv-a"))


def test_registration() -> None:
    registry = ToolRegistry()
    register_shell_audit(registry, home=Path("/nonexistent"))
    tool = registry.get("shell_audit")
    assert tool is not None and tool.read_only and tool.output_schema == AUDIT_SCHEMA
    assert tool.input_schema["properties"]["tasks"]


async def test_over_tether_mcp(tether_home: Path) -> None:
    _seed(tether_home)
    async with shell_client(tether_home, "conv-a") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["shell_audit"].output_schema is not None
        text, data = await call(
            client,
            "shell_audit",
            {"tasks": [{"target": {"sessions": "*"}, "action": {"kind": "audit", "actor": "panel"}}]},
        )
        jsonschema.validate(data, AUDIT_SCHEMA)
        assert data["tasks"][0]["count"] == 1 and "panel (panel) shell.lock dsh-bbbbbb ok" in text
        # The default target (mine) uses the conversation of this MCP session.
        _, data = await call(client, "shell_audit", {"tasks": [{"action": {"kind": "audit"}}]})
        assert [r["actor"] for r in data["tasks"][0]["records"]] == ["conv-a", "conv-a", "conv-a"]
        assert data["tasks"][0]["records"][-1]["tool"] == "shell_audit"  # the first call, audited
        bad = await client.call_tool("shell_audit", {"tasks": [{"action": {"kind": "audit", "days": 0}}]})
        assert bad.is_error
