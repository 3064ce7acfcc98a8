"""The panel's approvals API and push, over real HTTP and WebSocket: a guard block with
``[guard] ask = true`` from an agent without elicitation waits in the queue, is pushed to the
page's event stream, and is answered by ``POST /panel/api/approvals/<id>``; a second answer, a
malformed one and one without the panel's sign-in are refused without deciding anything."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import websockets
from mcp import Client
from panel_harness import Served, agent, browserless, serving_tools

from hang import HANG_S
from tether.store.approvals import ApprovalQueue
from tether.store.db import Store

pytestmark = pytest.mark.timeout(180)


async def _messages(served: Served) -> AsyncIterator[dict[str, Any]]:
    """Every approvals message of the page's event stream, whole (pending and decided)."""
    async with websockets.connect(
        f"{served.ws_base}/panel/ws/events",
        origin=served.origin,  # type: ignore[arg-type]
        additional_headers={"Cookie": served.cookie_header()},
    ) as ws:
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "approvals":
                yield msg


async def _pushed(served: Served) -> AsyncIterator[list[dict[str, Any]]]:
    """Every approvals message the page's event stream pushes (the pending questions)."""
    async for msg in _messages(served):
        yield msg["pending"]


async def _run(client: Client, shell: str, command: str) -> dict[str, Any]:
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": command},
        "wait": {"kind": "exit"},
    }
    result = await client.call_tool("shell_run", {"tasks": [task]})
    out: dict[str, Any] = (result.structured_content or {})["tasks"][0]
    return out


@pytest.mark.parametrize("approve", [True, False])
async def test_a_guard_block_is_answered_in_the_panel(
    tether_home: Path, tmp_path: Path, approve: bool
) -> None:
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    command = "git push --force origin main; echo pushed=$?"
    async with serving_tools(tether_home) as served, agent(served) as client, browserless(served) as http:
        # Outside any repository (the suite may run from a clone whose origin is a real one): the
        # approved push must fail with git's "not a git repository" (128), and push nothing.
        outside = tmp_path / "not-a-repo"
        outside.mkdir()
        opened = await client.call_tool(
            "shell_open", {"tasks": [{"action": {"kind": "open", "cwd": str(outside)}}]}
        )
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        got: dict[str, Any] = {}

        async def ask() -> None:
            got["out"] = await _run(client, shell, command)

        async with anyio.create_task_group() as tg:
            stream = _pushed(served)
            assert await anext(stream) == []  # the page starts with an empty list
            tg.start_soon(ask)
            with anyio.fail_after(HANG_S):
                [question] = await anext(stream)
            assert question["kind"] == "bypass-guard" and question["mode"] == "git-force-push"
            assert question["tool"] == "shell_run" and question["subject"] == command
            assert "git-force-push" in question["question"]
            listed = (await http.get("/panel/api/approvals")).json()["pending"]
            assert [q["id"] for q in listed] == [question["id"]]

            bad = await http.post(f"/panel/api/approvals/{question['id']}", json={"approve": "yes"})
            assert bad.status_code == 400 and '"approve" must be true' in bad.json()["message"]
            async with browserless(served, signed_in=False) as stranger:
                refused = await stranger.post(
                    f"/panel/api/approvals/{question['id']}", json={"approve": True}
                )
                assert refused.status_code in (401, 403)
            answer = await http.post(
                f"/panel/api/approvals/{question['id']}", json={"approve": approve, "reason": "  my call  "}
            )
            assert answer.status_code == 200, answer.text
            assert answer.json() == {
                "id": question["id"],
                "status": "approved" if approve else "denied",
                "by": "person at the panel",
            }
            with anyio.fail_after(HANG_S):
                assert await anext(stream) == []  # answered: it leaves every page's list
            await stream.aclose()
        again = await http.post(f"/panel/api/approvals/{question['id']}", json={"approve": not approve})
        assert again.status_code == 404 and again.json()["error"] == "NOT_FOUND"
    out = got["out"]
    if approve:
        assert out["ok"] and "pushed=128" in out["lines"], out
        assert any("approved by person at the panel: my call" in line for line in out["lines"])
    else:
        assert not out["ok"] and out["errorCode"] == "BLOCKED"
        assert 'person at the panel denied it: "my call"' in out["error"], out
    records = []
    for day in sorted((tether_home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    [decision] = [r for r in records if r.get("action") == "approval"]
    assert decision["actor"] == "person at the panel" and decision["source"] == "panel"
    assert decision["reason"] == "my call" and decision["flags"] == ["bypass-guard"]
    assert decision["extra"]["answer"] == ("approved" if approve else "denied")


async def test_a_question_that_expires_joins_decided_lately_without_another_change(tether_home: Path) -> None:
    """Nobody answers: the question leaves the pending list at its deadline, and its outcome
    (``refused: nobody answered in time``) reaches every page once its asker closes it — here later
    than the deadline, as an asker in another process (a ``tether mcp``) may. Before, the stream
    waited only for the pending ids to change again, so the page never heard of it. (The first
    attempt, reverted in 4696ed5, compared the bare ids of both lists: an answered question has the
    same id in the decided list as it had in the pending one, so no answer was pushed at all.)"""
    store = Store.open(tether_home)
    queue = ApprovalQueue(store, tether_home)
    try:
        async with serving_tools(tether_home) as served:
            stream = _messages(served)
            with anyio.fail_after(HANG_S):
                assert (await anext(stream))["pending"] == []
                asked = queue.ask(
                    kind="bypass-guard",
                    tool="shell_run",
                    subject="git push --force origin main",
                    mode="git-force-push",
                    justification="",
                    asker="conv-test",
                    targets=(),
                    channel="panel",
                    timeout_ms=1000,
                )
                assert [q["id"] for q in (await anext(stream))["pending"]] == [asked.id]
                gone = await anext(stream)  # its deadline passed; its asker has not closed it yet
                assert gone["pending"] == [] and gone["decided"] == []
                assert queue.close(asked.id, "expired")  # the asker, later
                told = await anext(stream)
            await stream.aclose()
    finally:
        store.close()
    [outcome] = told["decided"]
    assert outcome["id"] == asked.id and outcome["outcome"] == "refused: nobody answered in time"
