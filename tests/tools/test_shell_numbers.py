"""Numbers at the shell tools' boundary, through the official MCP client over ``tether mcp``.

Budgets past their range are clamped and the result says so (text and ``notes``); integral floats
are integers everywhere (JSON Schema counts 1500.0 as one); 1500.5 is refused with the field named.
"""

from __future__ import annotations

from pathlib import Path

from shell_harness import call, open_shell, run, shell_client


async def test_clamped_budgets_are_reported_and_used(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cols=120.0, rows=32.0)
        task = {
            "target": {"sessions": shell},
            "action": {"kind": "run", "command": "echo clamped-ok"},
            "wait": {"kind": "exit", "timeoutMs": 90_000_000, "pollMs": 5},
            "output": {"lines": 5000},
        }
        text, data = await call(client, "shell_run", {"tasks": [task], "concurrency": 12.0})
        notes = [
            "concurrency 12 clamped to 8",
            "tasks[0].wait.timeoutMs 90000000 clamped to 86400000",
            "tasks[0].wait.pollMs 5 clamped to 20",
            "tasks[0].output.lines 5000 clamped to 2000",
        ]
        assert data["notes"] == notes
        assert text.splitlines()[1:5] == [f"[{n}]" for n in notes], text
        assert data["tasks"][0]["exitCode"] == 0 and data["tasks"][0]["lines"] == ["clamped-ok"]
        # Nothing clamped: no notes.
        _, quiet = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {"target": {"sessions": shell}, "action": {"kind": "read"}, "output": {"lines": 2000}}
                ]
            },
        )
        assert quiet["notes"] == []


async def test_integral_floats_are_integers_and_fractions_are_refused(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, idleMinutes=0.0)
        out = await run(client, shell, "(exit 3)", wait={"kind": "exit", "code": 3.0, "timeoutMs": 1500.0})
        assert out["exitCode"] == 3 and out["met"] is True, out
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read", "search": "exit", "context": 1.0, "matchOffset": 0.0},
                        "output": {"lines": 3.0},
                    }
                ]
            },
        )
        assert data["tasks"][0]["ok"], data
        cases = [
            (
                "shell_run",
                {"kind": "run", "command": "true"},
                {"wait": {"timeoutMs": 1500.5}},
                "tasks[0].wait.timeoutMs",
            ),
            ("shell_read", {"kind": "read"}, {"output": {"lines": 2.5}}, "tasks[0].output.lines"),
            (
                "shell_read",
                {"kind": "read", "search": "x", "matchOffset": 1.5},
                {},
                "tasks[0].action.matchOffset",
            ),
            ("shell_manage", {"kind": "resize", "cols": 80.5}, {}, "tasks[0].action.cols"),
        ]
        for tool, action, blocks, field in cases:
            result = await client.call_tool(
                tool, {"tasks": [{"target": {"sessions": shell}, "action": action, **blocks}]}
            )
            text = "".join(getattr(block, "text", "") for block in result.content)
            assert result.is_error and field in text and ".5" in text, (tool, text)
