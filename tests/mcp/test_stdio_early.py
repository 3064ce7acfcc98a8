"""``tether mcp`` answers the handshake before the SDK takes over, and hands over without loss.

The hand-over gate (``TETHER_MCP_HANDOVER_GATE``, a FIFO) holds the SDK back until the test opens
it, so "answered before the SDK was there" is a fact of the test, not a timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from stdio_driver import INIT_PARAMS, TETHER, Gate, tether_env, tether_mcp

pytestmark = pytest.mark.timeout(120)


def _cache_files(home: Path) -> list[Path]:
    return sorted((home / "cache").glob("mcp-*.json"))


async def _prime(home: Path) -> dict[str, object]:
    """One normal session: it records the handshake; returns what the SDK answered."""
    params = StdioServerParameters(command=TETHER, args=["mcp"], env=tether_env(home))
    async with Client(params) as client:
        tools = await client.list_tools()
        assert client.session.initialize_result is not None
        return {
            "instructions": client.session.initialize_result.instructions,
            "tools": [t.name for t in tools.tools],
        }


async def test_cached_handshake_is_answered_before_the_sdk(tether_home: Path) -> None:
    real = await _prime(tether_home)
    assert len(_cache_files(tether_home)) == 1
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.request("d", "server/discover")
        refused = mcp.response("d")
        assert refused["error"]["code"] == -32601 and "initialize handshake" in refused["error"]["message"]
        answer = mcp.initialize()["result"]
        assert answer["protocolVersion"] == INIT_PARAMS["protocolVersion"]
        assert answer["instructions"] == real["instructions"]
        assert answer["serverInfo"]["name"] == "tether"
        mcp.request(2, "tools/list")
        assert [t["name"] for t in mcp.response(2)["result"]["tools"]] == real["tools"]
        mcp.request(3, "ping")
        assert mcp.response(3)["result"] == {}
        # All of that came while the SDK was held back; a tool call waits for it, then works.
        mcp.request(
            4, "tools/call", {"name": "bash", "arguments": {"command": "echo hi", "description": "x"}}
        )
        gate.open()
        seen = mcp.recv_until(lambda m: m.get("id") == 4)
        assert seen[-1]["result"]["content"][0]["text"] == "hi"
        # Exactly one answer to initialize: the SDK's own was dropped, nothing else came meanwhile.
        assert [m.get("id") for m in seen] == [4]


async def test_an_unknown_protocol_version_gets_the_latest(tether_home: Path) -> None:
    await _prime(tether_home)
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.request(1, "initialize", {**INIT_PARAMS, "protocolVersion": "1999-01-01"})
        assert mcp.response(1)["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION
        gate.open()
        mcp.request(2, "ping")
        assert mcp.response(2)["result"] == {}


def test_without_a_cache_initialize_waits_for_the_sdk(tether_home: Path) -> None:
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.request(1, "initialize", INIT_PARAMS)
        mcp.request(2, "ping")
        # The ping, sent second, is answered first: initialize was kept for the SDK.
        assert mcp.recv()["id"] == 2
        gate.open()
        assert mcp.response(1)["result"]["serverInfo"]["name"] == "tether"
        mcp.notify("notifications/initialized")
        mcp.request(3, "tools/list")
        assert "bash" in [t["name"] for t in mcp.response(3)["result"]["tools"]]
    assert len(_cache_files(tether_home)) == 1  # this session recorded the handshake for the next


async def test_a_stale_tool_list_is_corrected_with_list_changed(tether_home: Path) -> None:
    await _prime(tether_home)
    (path,) = _cache_files(tether_home)
    entry = json.loads(path.read_text())
    entry["tools"]["tools"] = [t for t in entry["tools"]["tools"] if t["name"] != "job_kill"]
    path.write_text(json.dumps(entry))
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.initialize()
        mcp.request(2, "tools/list")
        assert "job_kill" not in [t["name"] for t in mcp.response(2)["result"]["tools"]]
        gate.open()
        changed = mcp.recv()
        assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        mcp.request(3, "tools/list")
        assert "job_kill" in [t["name"] for t in mcp.response(3)["result"]["tools"]]
    rewritten = json.loads(path.read_text())
    assert "job_kill" in [t["name"] for t in rewritten["tools"]["tools"]]


async def test_a_call_cancelled_before_the_hand_over_is_never_run_or_answered(tether_home: Path) -> None:
    await _prime(tether_home)
    marker = tether_home / "ran"
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.initialize()
        command = f"sleep 0.5; touch {marker}"
        mcp.request(7, "tools/call", {"name": "bash", "arguments": {"command": command, "description": "x"}})
        mcp.notify("notifications/cancelled", {"requestId": 7, "reason": "changed my mind"})
        gate.open()
        # job_list lists foreground calls while they run; the cancelled one must be gone.
        for attempt in range(200):
            mcp.request(100 + attempt, "tools/call", {"name": "job_list", "arguments": {}})
            if mcp.response(100 + attempt)["result"]["structuredContent"]["jobs"] == []:
                break
        mcp.request(
            8, "tools/call", {"name": "bash", "arguments": {"command": "sleep 1", "description": "x"}}
        )
        seen = mcp.recv_until(lambda m: m.get("id") == 8)
        assert 7 not in [m.get("id") for m in seen]
    assert not marker.exists()


def test_stdin_closed_before_the_hand_over_ends_the_process(tether_home: Path) -> None:
    with Gate(tether_home) as gate, tether_mcp(tether_home, TETHER_MCP_HANDOVER_GATE=str(gate.path)) as mcp:
        mcp.request(1, "ping")
        assert mcp.response(1)["result"] == {}
        pid = mcp.proc.pid
        mcp.close_stdin()
        gate.open()
        assert mcp.wait() == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_cache_that_cannot_be_written_leaves_nothing_behind(tether_home: Path) -> None:
    from tether.mcp.handshake import Handshake, HandshakeCache

    cache = HandshakeCache(tether_home, "k" * 64)
    cache.path.mkdir(parents=True)  # in the way of the rename, as a full disk is of the write
    entry = Handshake(initialize={}, tools={"tools": []}, versions=("2025-06-18",), latest="2025-06-18")
    cache.save(entry)  # logged, never raised: a start without the cache only answers later
    assert sorted(p.name for p in cache.dir.iterdir()) == [cache.path.name]
    cache.path.rmdir()
    cache.save(entry)
    loaded = cache.load()
    assert loaded is not None and (loaded.tools, loaded.versions) == (entry.tools, entry.versions)
