"""Malformed input always gets an answer naming what was wrong, and the server keeps serving.

stdio: raw lines into a real ``tether mcp``; HTTP: raw requests into the in-process app. Each
case is followed by a normal call that must still work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp_harness import Probe, raw_session, rpc_payload, serving
from stdio_driver import StdioDriver, tether_mcp

from tether.mcp.server import McpFrontDoor
from tether.mcp.wire import MAX_LINE_BYTES

pytestmark = pytest.mark.timeout(120)
PAST_PARSER = 20_000  # deeper than json.loads reads on Python 3.11, 3.12 and 3.13


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def _call(rid: Any, arguments: str) -> bytes:
    head = '{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"method":"tools/call",'
    return (head + '"params":{"name":"bash","arguments":' + arguments + "}}").encode()


def _still_serving(mcp: StdioDriver, rid: int) -> None:
    mcp.request(rid, "tools/call", {"name": "bash", "arguments": {"command": "echo ok", "description": "x"}})
    assert mcp.response(rid)["result"]["content"][0]["text"] == "ok"


def test_stdio_answers_every_malformed_line(tether_home: Path) -> None:
    cases: list[tuple[bytes, Any, int, str]] = [
        (b"not json", None, -32700, "not valid JSON"),
        (b'{"jsonrpc":"2.0","id":11,"method":"ping"', 11, -32700, "not valid JSON"),
        (b'[{"jsonrpc":"2.0","id":12,"method":"ping"}]', None, -32600, "batches are not supported"),
        (b'"just a string"', None, -32600, "must be a JSON object"),
        (b'{"jsonrpc":"1.0","id":13,"method":"ping"}', 13, -32600, "'jsonrpc'"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, -32600, "'id' must be a string or an integer"),
        (b'{"jsonrpc":"2.0","id":14,"method":7}', 14, -32600, "'method'"),
        (
            b'{"jsonrpc":"2.0","id":15,"method":"tools/call","params":[1]}',
            15,
            -32600,
            "'params' must be an object",
        ),
        (b'{"jsonrpc":"2.0","id":16}', 16, -32600, "needs field 'method'"),
        (
            b'{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":5}}',
            17,
            -32602,
            "'params.uri'",
        ),
        (b'{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"arguments":{}}}', 18, -32602, "'name'"),
        # Past the JSON parser's depth on every supported Python (about 1,000 levels on 3.11,
        # 1,500 on 3.12, 10,000 on 3.13: shallower ones parse, and get the tool error below).
        (_call(19, _nested(PAST_PARSER)), 19, -32600, "nests arrays/objects too deeply"),
        (_call("deep", "{" + '"a":{' * PAST_PARSER + "}" * (PAST_PARSER + 1)), "deep", -32600, "too deeply"),
        (b"\xff\xfe{garbage", None, -32700, "not valid JSON"),
        # Past Python's 4,300-digit limit, said for a client (not "use sys.set_int_max_str_digits").
        (
            _call(20, '{"timeoutMs":1' + "0" * 5000 + "}"),
            20,
            -32700,
            "a number has 5001 digits; numbers of at most",
        ),
    ]
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        for number, (line, rid, code, words) in enumerate(cases):
            mcp.send(line)
            answer = mcp.recv()
            assert answer.get("id") == rid, line[:80]
            assert answer["error"]["code"] == code, (line[:80], answer)
            assert words in answer["error"]["message"], (line[:80], answer)
            _still_serving(mcp, 1000 + number)


@pytest.mark.parametrize("arguments", ["[1,2]", '"echo hi"', "42", "true"])
def test_stdio_non_object_arguments_are_a_named_tool_error(tether_home: Path, arguments: str) -> None:
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        mcp.send(_call(5, arguments))
        result = mcp.response(5)["result"]
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert text.startswith("INVALID_ARGUMENT: bash: invalid arguments: 'arguments' must be a JSON object")
        assert "allowed fields: command, description" in text
        _still_serving(mcp, 6)


@pytest.mark.parametrize("depth", [33, 200, 250, 900])
def test_stdio_deeply_nested_arguments_are_a_named_tool_error(tether_home: Path, depth: int) -> None:
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        args = '{"command":"echo","description":"x","junk":' + _nested(depth) + "}"
        mcp.send(_call(5, args))
        result = mcp.response(5)["result"]
        assert result["isError"] is True
        assert "field 'junk' nests arrays/objects more than 32 levels deep" in result["content"][0]["text"]
        shallow = '{"command":"echo","description":"x","junk":' + _nested(30) + "}"
        mcp.send(_call(6, shallow))
        assert "unknown field 'junk'" in mcp.response(6)["result"]["content"][0]["text"]
        _still_serving(mcp, 7)


def test_stdio_lone_surrogates_are_a_named_tool_error_and_audited(tether_home: Path) -> None:
    """JSON may escape half a UTF-16 pair (``\\ud800``); no terminal, file or database takes it. Each
    tool refuses it by field (it reached SQLite from a rename, and crashed the call), audited."""
    cases = [
        ("bash", '{"command":"echo \\ud800","description":"x"}', "bash: field 'command'"),
        (
            "shell_open",
            '{"tasks":[{"action":{"kind":"open","label":"a\\udfffb"}}]}',
            "field 'tasks[0].action.label'",
        ),
        (
            "shell_manage",
            '{"tasks":[{"target":{"sessions":"SHELL"},"action":{"kind":"rename","label":"\\ud800"}}]}',
            "field 'tasks[0].action.label'",
        ),
        (
            "shell_run",
            '{"tasks":[{"target":{"sessions":"SHELL"},"action":{"kind":"run","command":"x"},'
            '"label":"ok","\\ud800":1}]}',
            "a field name in 'tasks[0]'",
        ),
    ]
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        mcp.request(
            1, "tools/call", {"name": "shell_open", "arguments": {"tasks": [{"action": {"kind": "open"}}]}}
        )
        shell = mcp.response(1)["result"]["structuredContent"]["tasks"][0]["shell"]
        for number, (tool, arguments, field) in enumerate(cases, start=2):
            line = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
            mcp.send((line % (number, tool, arguments.replace("SHELL", shell))).encode())
            answer = mcp.response(number)
            assert "result" in answer, answer
            result = answer["result"]
            text = result["content"][0]["text"]
            assert result["isError"] is True, text
            assert (
                text.startswith(f"INVALID_ARGUMENT: {tool}: ") and f"{field} is not Unicode text" in text
            ), text
        _still_serving(mcp, 50)
    records = [
        json.loads(line)
        for day in (tether_home / "audit").glob("*.jsonl")
        for line in day.read_text().splitlines()
    ]
    refused = [r for r in records if "is not Unicode text" in r.get("detail", "")]
    assert [r["tool"] for r in refused] == [tool for tool, _, _ in cases]


def test_stdio_oversized_line_is_answered_and_skipped(tether_home: Path) -> None:
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        filler = "x" * (MAX_LINE_BYTES + 1024)
        mcp.send(
            (
                '{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"bash","arguments":'
                '{"command":"' + filler + '"}}}'
            ).encode()
        )
        answer = mcp.response("big", timeout=60)
        assert answer["error"]["code"] == -32600 and "longer than 64 MiB" in answer["error"]["message"]
        _still_serving(mcp, 2)


async def test_http_non_object_arguments_and_bad_params_are_named(probe: Probe) -> None:
    front = McpFrontDoor(probe.registry())
    async with serving(front) as url, httpx2.AsyncClient() as http:
        session = await raw_session(http, url)

        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": [1]},
        }
        result = rpc_payload(await http.post(url, json=call, headers=session))["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"] == (
            "INVALID_ARGUMENT: echo: invalid arguments: 'arguments' must be a JSON object mapping parameter "
            "names to values, got an array; allowed fields: word"
        )
        bad = {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": 5}}
        error = rpc_payload(await http.post(url, json=bad, headers=session))["error"]
        assert (
            error["code"] == -32602
            and "resources/read" in error["message"]
            and "'params.uri'" in error["message"]
        )

        ok = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"word": "a"}},
        }
        assert rpc_payload(await http.post(url, json=ok, headers=session))["result"]["structuredContent"] == {
            "echo": "a"
        }


def test_huge_numbers_are_echoed_by_their_size(tether_home: Path) -> None:
    """JSON allows a 4,000-digit integer; a note or an error that echoes one names its first digits
    and its length instead of burying the answer under it."""
    huge = "1" + "0" * 300
    short = "100000000000… (301 digits)"
    with tether_mcp(tether_home) as mcp:
        mcp.initialize()
        mcp.send(_call(1, '{"command":"echo hi","description":"x","timeoutMs":' + huge + "}"))
        text = mcp.response(1)["result"]["content"][0]["text"]
        assert text.startswith(f"[timeoutMs {short} clamped to 600000, the maximum"), text
        assert len(text) < 200, text
        mcp.send(_call(2, '{"command":"echo hi","description":"x","timeoutMs":-' + huge + "}"))
        text = mcp.response(2)["result"]["content"][0]["text"]
        assert f"field 'timeoutMs' is -{short};" in text and len(text) < 300, text
        task = '{"tasks":[{"action":{"kind":"open","cols":' + huge + "}}]"
        line = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"shell_open","arguments":'
        mcp.send((line + task + ',"concurrency":' + huge + "}}}").encode())
        text = mcp.response(3)["result"]["content"][0]["text"]
        assert f"tasks[0].action.cols: must be from 20 to 1000 (columns); got {short}" in text, text
        _still_serving(mcp, 4)
