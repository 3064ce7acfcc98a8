"""The persistent-shell tools over ``tether serve``'s streamable HTTP front door: two conversations,
and the audit records of calls their client or its session ended."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))

from mcp_harness import http_client, raw_session, rpc_payload, serving
from shell_harness import TETHER, call, text_of

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg
from tether.config import load_config
from tether.mcp.server import McpFrontDoor
from tether.tools.catalog import build_catalog


async def test_two_http_conversations_see_mine_and_others(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url, http_client(url) as first, http_client(url) as second:
            _, data = await call(
                first, "shell_open", {"tasks": [{"action": {"kind": "open", "label": "one"}}]}
            )
            shell = data["tasks"][0]["shell"]
            args = {
                "tasks": [{"action": {"kind": "run", "command": "echo over-http"}, "wait": {"kind": "exit"}}]
            }
            _, data = await call(first, "shell_run", args)
            assert data["tasks"][0]["lines"] == ["over-http"] and data["tasks"][0]["exitCode"] == 0
            _, data = await call(second, "shell_state", {"scope": "*"})
            assert [(r["shell"], r["owner"]) for r in data["shells"]] == [(shell, "others")]
            result = await second.call_tool("shell_run", args)  # `mine` is empty for the second one
            assert "has no live shell" in text_of(result)
            _, data = await call(
                second,
                "shell_read",
                {
                    "tasks": [
                        {"target": {"sessions": shell}, "action": {"kind": "read", "search": "over-http"}}
                    ]
                },
            )
            assert data["tasks"][0]["lines"][0].startswith("2 matches")  # the echoed command and its output
    finally:
        await catalog.aclose()


def _record(home: Path, tool: str) -> dict[str, Any] | None:
    """The audit record of the (one) call of ``tool``, once it is written."""
    for path in sorted((home / "audit").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["tool"] == tool:
                return dict(record)
    return None


async def _audited(home: Path, tool: str) -> dict[str, Any]:
    with anyio.fail_after(HANG_S):
        while (record := _record(home, tool)) is None:
            await anyio.sleep(0.01)
    return record


async def _post_call(
    http: httpx2.AsyncClient,
    url: str,
    session: dict[str, str],
    rid: int,
    name: str,
    arguments: dict[str, Any],
) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return await http.post(url, json=body, headers=session)


async def _call_tool(
    http: httpx2.AsyncClient,
    url: str,
    session: dict[str, str],
    rid: int,
    name: str,
    arguments: dict[str, Any],
) -> dict[str, Any]:
    return rpc_payload(await _post_call(http, url, session, rid, name, arguments))


async def test_calls_ended_by_their_client_or_its_session_are_audited_with_the_cause(
    tether_home: Path, tmp_path: Path
) -> None:
    # Every call ended before it answered was audited "the caller cancelled the call": whether the
    # client cancelled it, ended its session (DELETE), or left it to the session's idle limit.
    (tether_home / "config.toml").write_text("[shell]\ngrace_ms = 600000\n")  # a grace no test waits out
    token = unique_sleep_arg()
    catalog = build_catalog(load_config(tether_home))
    door = McpFrontDoor(catalog.registry, on_conversation_end=catalog.end_conversation)
    try:
        async with serving(door) as url, httpx2.AsyncClient(timeout=HANG_S) as http:
            # The client's notifications/cancelled (the official client, through the SDK's path).
            async with http_client(url) as client:
                bash = {"command": f"touch {tmp_path}/bash; sleep {token}", "description": "x"}
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.call_tool, "bash", bash)
                    with anyio.fail_after(HANG_S):
                        while not (tmp_path / "bash").exists():
                            await anyio.sleep(0.01)
                    tg.cancel_scope.cancel()
            record = await _audited(tether_home, "bash")
            assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "client-cancelled", record
            assert record["detail"] == "the MCP client cancelled the call (notifications/cancelled)"

            # DELETE of the session while a job_kill waits out the grace of a job ignoring SIGTERM.
            session = await raw_session(http, url)
            job = {
                # Its bash names the token, so that the test's end finds it.
                "command": "exec bash -c 'trap \"touch $0\" TERM; while :; do sleep 1; done' "
                f"{tmp_path}/term {token}",
                "description": "ignores SIGTERM",
                "run_in_background": True,
            }
            started = await _call_tool(http, url, session, 2, "bash", job)
            job_id = started["result"]["structuredContent"]["jobId"]
            async with anyio.create_task_group() as tg:
                # Its POST is answered with an empty stream once the session has ended.
                tg.start_soon(_post_call, http, url, session, 3, "job_kill", {"jobId": job_id, "reason": "r"})
                with anyio.fail_after(HANG_S):
                    while not (tmp_path / "term").exists():  # the kill is in its grace
                        await anyio.sleep(0.01)
                assert (await http.delete(url, headers=session)).status_code == 200
            record = await _audited(tether_home, "job_kill")
            assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "session-ended", record
            assert record["detail"] == "the HTTP client ended its MCP session (DELETE) during the call"

            # A shell_run whose client dropped its connection: it runs on (a disconnection is no
            # cancellation) until the session's idle limit ends the session.
            manager = door.session_watch.__self__  # type: ignore[union-attr]  # RandomSessionIdManager.watch
            manager.session_idle_timeout = 1.0  # from 30 minutes, for the sessions opened from now on
            session = await raw_session(http, url)
            opened = await _call_tool(
                http, url, session, 2, "shell_open", {"tasks": [{"action": {"kind": "open"}}]}
            )
            shell = opened["result"]["structuredContent"]["tasks"][0]["shell"]
            run = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": f"touch {tmp_path}/run; sleep {token}"},
                "wait": {"kind": "exit", "timeoutMs": 600_000},
            }
            body = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "shell_run", "arguments": {"tasks": [run]}},
            }
            async with http.stream("POST", url, json=body, headers=session):
                with anyio.fail_after(HANG_S):
                    while not (tmp_path / "run").exists():
                        await anyio.sleep(0.01)
            # The connection is dropped with the response unread.
            record = await _audited(tether_home, "shell_run")
            assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "session-expired", record
            assert record["detail"] == (
                "tether serve ended the MCP session: no request of it in flight for its idle limit (1 s)"
            )
    finally:
        kill_all(alive_with(token))  # the job that ignores SIGTERM too, before the 600 s grace
        await catalog.aclose()
    verify = await anyio.run_process([TETHER, "audit", "verify"], check=False)
    assert verify.returncode == 0 and b"intact" in verify.stdout, verify.stdout + verify.stderr
