"""A request id is unique among the requests in flight (JSON-RPC 2.0): a request reusing the id of
one still running is answered at once with an error naming the id, and the first goes on.

Real ``tether mcp`` processes spoken to with the raw driver (the SDK's client never reuses an id).
The first call runs ``cat`` on a FIFO, so it is in flight until the test writes to it: no timing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp_harness import Probe, raw_session, rpc_payload, serving
from stdio_driver import StdioDriver, tether_mcp

from tether.mcp.server import McpFrontDoor

pytestmark = pytest.mark.timeout(120)

# A non-plain ``_meta`` sends a call through the SDK instead of the direct path (tether.mcp.direct).
SDK_META = {"progressToken": "p", "other": True}


def _bash(command: str, *, via: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "bash", "arguments": {"command": command, "description": "x"}}
    if via == "sdk":
        params["_meta"] = SDK_META
    return params


def _release(fifo: Path, text: str) -> threading.Thread:
    """Write ``text`` into ``fifo`` once ``cat`` opens it (a thread: opening waits for the reader)."""

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as pipe:
            pipe.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def _is_duplicate_error(message: dict[str, Any], rid: Any) -> bool:
    error = message.get("error")
    return (
        isinstance(error, dict)
        and error.get("code") == -32600
        and f"id {rid!r} is already in use" in str(error.get("message"))
    )


@pytest.mark.parametrize("first", ["direct", "sdk"])
def test_an_id_in_use_is_refused_at_once_and_the_first_call_is_answered_once(
    tether_home: Path, tmp_path: Path, first: str
) -> None:
    fifo = tmp_path / "go.fifo"
    os.mkfifo(fifo)
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        mcp.request(7, "tools/call", _bash(f"cat {fifo}", via=first))
        # The same id on each path while call 7 waits: a plain call, one through the SDK, another
        # method, and the id as a string (which the SDK correlates with 7, as a cancel does).
        mcp.request(7, "tools/call", _bash("echo second", via="direct"))
        mcp.request(7, "tools/call", _bash("echo third", via="sdk"))
        mcp.request(7, "tools/list")
        mcp.request("7", "ping")
        refused = [mcp.response(7), mcp.response(7), mcp.response(7), mcp.response("7")]
        assert [_is_duplicate_error(m, rid) for m, rid in zip(refused, (7, 7, 7, "7"), strict=True)] == [
            True
        ] * 4, refused
        assert "new id" in refused[0]["error"]["message"]
        writer = _release(fifo, "released\n")
        answer = mcp.response(7)
        writer.join(30)
        assert answer["result"]["content"][0]["text"] == "released", answer
        mcp.request(8, "ping")
        after = mcp.recv_until(lambda m: m.get("id") == 8)
        assert [m for m in after if m.get("id") in (7, "7")] == []  # one answer for call 7, not two
        # Answered, id 7 is free again.
        mcp.request(7, "tools/call", _bash("echo again", via=first))
        assert mcp.response(7)["result"]["content"][0]["text"] == "again"


def test_an_id_is_free_again_once_its_call_was_cancelled(tether_home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "never.fifo"
    os.mkfifo(fifo)
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        mcp.request(5, "tools/call", _bash(f"cat {fifo}", via="direct"))
        mcp.notify("notifications/cancelled", {"requestId": 5, "reason": "changed my mind"})
        # Until its cancellation has run, 5 is still in flight; then it is free, and never answered.
        answer = _until_not_refused(mcp, 5)
        assert answer["result"]["content"][0]["text"] == "fresh", answer


def _until_not_refused(mcp: StdioDriver, rid: int) -> dict[str, Any]:
    """Ask with ``rid`` until it is no longer refused as in use (each refusal is an answer at once)."""
    for _ in range(1000):
        mcp.request(rid, "tools/call", _bash("echo fresh", via="direct"))
        answer = mcp.response(rid)
        if not _is_duplicate_error(answer, rid):
            return answer
    raise AssertionError(f"id {rid} stayed in use after its call was cancelled")


async def test_http_an_id_in_use_in_a_session_is_refused_and_the_first_call_answered(probe: Probe) -> None:
    """Over HTTP the SDK let the second request replace the first: the first POST never got its
    answer and a cancel reached the second. Now the second is refused and the first is served."""
    async with serving(McpFrontDoor(probe.registry())) as url, httpx2.AsyncClient(timeout=60) as http:
        session = await raw_session(http, url)
        first: list[httpx2.Response] = []

        async def hang() -> None:
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "hang", "arguments": {}},
            }
            first.append(await http.post(url, json=call, headers=session))

        async with anyio.create_task_group() as tg:
            tg.start_soon(hang)
            await probe.started.wait()
            for rid, method, params in (
                (2, "tools/call", {"name": "echo", "arguments": {"word": "b"}}),
                ("2", "ping", None),
            ):
                message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
                if params is not None:
                    message["params"] = params
                answer = rpc_payload(await http.post(url, json=message, headers=session))
                assert _is_duplicate_error(answer, rid) and answer["id"] == rid, answer
            # The cancel reaches the first call (not a second one that replaced it), whose POST ends.
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
            await http.post(url, json=cancel, headers=session)
            await probe.cancelled.wait()
        assert len(first) == 1
        # Once the first ended, its id is free again.
        again = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"word": "c"}},
        }
        assert rpc_payload(await http.post(url, json=again, headers=session))["result"][
            "structuredContent"
        ] == {"echo": "c"}
