"""Spec 003 conformance points found wrong by the third stop's audit, driven through the real MCP
client: each test states the rule it pins (see docs/development.md, "Persistent-shell spec audit")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from shell_harness import call, open_shell, shell_client, tmux

from hang import HANG_MS, HANG_S


async def _gate_after_start(started: Path, gate: Path) -> None:
    """Open ``gate`` once the command under test proved it runs (it touched ``started``)."""
    with anyio.fail_after(HANG_S):
        while not await anyio.Path(started).exists():
            await anyio.sleep(0.02)
    await anyio.Path(gate).touch()


async def test_match_waits_for_output_not_the_echoed_command(tether_home: Path, tmp_path: Path) -> None:
    """§3: ``match`` waits for *output* that appears after the wait starts. The shell echoing the
    typed command line is input: a pattern the command itself contains must wait for what the
    command prints (a run's wait, and a step's expect)."""
    async with shell_client(tether_home) as client:
        # Short names in a wide terminal: the echoed line fits on one screen line, as most commands
        # do, so the pattern is whole in it (a wrapped echo may split it).
        shell = await open_shell(client, cwd=str(tmp_path), cols=1000)
        for n, kind in enumerate(("run", "steps")):
            started, gate = tmp_path / f"started{n}", tmp_path / f"gate{n}"
            command = f"touch {started.name}; until [ -e {gate.name} ]; do sleep 0.05; done; echo READY-MARK"
            if kind == "run":
                action: dict[str, Any] = {"kind": "run", "command": command}
                wait = {"kind": "match", "pattern": "READY-MARK", "timeoutMs": HANG_MS}
            else:
                expect = {"kind": "match", "pattern": "READY-MARK"}
                step = {"send": command, "expect": expect, "timeoutMs": HANG_MS}
                action = {"kind": "steps", "steps": [step]}
                wait = {"kind": "idle", "timeoutMs": HANG_MS}
            task = {"target": {"sessions": shell}, "action": action, "wait": wait}
            result: dict[str, Any] = {}

            async def run_it(
                task: dict[str, Any] = task, result: dict[str, Any] = result, gate: Path = gate
            ) -> None:
                _, data = await call(client, "shell_run", {"tasks": [task]})
                result.update(data["tasks"][0])
                # What the wait was met by exists only once the gate is open.
                result["gate_open"] = await anyio.Path(gate).exists()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_it)
                tg.start_soon(_gate_after_start, started, gate)
            assert result["met"] is True, result
            assert result["gate_open"], f"{kind}: met before the command printed: {result}"
            assert "READY-MARK" in result["lines"], result
            # The shell is back at its prompt before the next round types.
            _, data = await call(
                client,
                "shell_read",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "read"},
                            "wait": {"kind": "idle", "timeoutMs": HANG_MS},
                        }
                    ]
                },
            )
            assert data["tasks"][0]["met"] is True


async def test_each_schema_describes_only_the_wait_kinds_its_tool_takes(tether_home: Path) -> None:
    """§3: shell_run waits for none/idle/bell/match/exit/file/noproc/cpu, shell_read for
    idle/bell/match/exit/foreground. The advertised schema's description of ``wait.kind`` named all
    nine kinds on both tools, offering a model kinds its tool refuses."""
    meanings = {
        "none": "none = ",
        "file": "file = ",
        "noproc": "noproc = ",
        "cpu": "cpu = ",
        "foreground": "foreground = ",
    }
    async with shell_client(tether_home) as client:
        listed = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    for name in ("shell_run", "shell_read"):
        kind = listed[name]["properties"]["tasks"]["items"]["properties"]["wait"]["properties"]["kind"]
        for value, said in meanings.items():
            assert (said in kind["description"]) == (value in kind["enum"]), (name, value, kind)


async def test_exit_wait_on_a_shell_without_runs_says_so(tether_home: Path) -> None:
    """§3: ``exit`` on shell_read without ``runId`` binds to the shell's latest shell_run. With none,
    the error named a ``runId`` that was never given ("any shell_run not found")."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        task = {
            "target": {"sessions": shell},
            "action": {"kind": "read"},
            "wait": {"kind": "exit", "timeoutMs": HANG_MS},
        }
        _, data = await call(client, "shell_read", {"tasks": [task]})
        error = data["tasks"][0]["error"]
        assert data["tasks"][0]["errorCode"] == "NOT_FOUND", data
        assert error.startswith("tasks[0].wait: ") and "has no shell_run" in error, error
        assert "runId:" not in error, error


async def test_a_batch_of_shells_keeps_labels_a_label_can_be(tether_home: Path) -> None:
    """§open: ``label`` (≤ 32 characters) is the base name and the panel's display name. A batch
    (count > 1) named its shells ``label-1``, ``label-2``: with a 32-character label those were 34
    characters, which ``workspace-save`` then refused to save ("label is longer than 32")."""
    base = "b" * 32
    async with shell_client(tether_home) as client:
        _, data = await call(
            client, "shell_open", {"tasks": [{"action": {"kind": "open", "label": base, "count": 2}}]}
        )
        shells = [t["shell"] for t in data["tasks"]]
        _, state = await call(client, "shell_state", {})
        labels = sorted(s["label"] for s in state["shells"] if s["shell"] in shells)
        assert labels == ["b" * 30 + "-1", "b" * 30 + "-2"], labels
        save = {"kind": "workspace-save", "name": "batch"}
        _, saved = await call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": ",".join(shells)}, "action": save}]}
        )
        assert saved["tasks"][0]["ok"] is True, saved


async def test_open_from_takes_a_size_given_with_it(tether_home: Path) -> None:
    """§open: ``cols``/``rows`` are the new shell's size; with ``from`` the snapshot's size is the
    default and a size given in the same action wins, as ``label`` and ``cwd`` do. It was dropped
    without a word (§1: fields are never silently ignored): the revived shell kept 120x32."""
    async with shell_client(tether_home) as client:
        old = await open_shell(client)
        await call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": old}, "action": {"kind": "close"}}]}
        )
        open_from = {"kind": "open", "from": old, "cols": 90, "rows": 20}
        _, data = await call(client, "shell_open", {"tasks": [{"action": open_from}]})
        new = data["tasks"][0]["shell"]
        assert " 90x20, revived from " in data["tasks"][0]["lines"][0], data
        assert (
            tmux(tether_home, "display", "-p", "-t", new, "#{window_width}x#{window_height}").strip()
            == "90x20"
        )
        # Without a size: the snapshot's, the 90x20 just given.
        await call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": new}, "action": {"kind": "close"}}]}
        )
        _, again = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "from": new}}]})
        assert " 90x20, revived from " in again["tasks"][0]["lines"][0], again
