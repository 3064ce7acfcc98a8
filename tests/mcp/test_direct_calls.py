"""``tools/call`` answered beside the SDK on stdio (``tether.mcp.direct``), on real processes.

Each test runs ``stdio_probe_server.py``: in ``direct`` mode (no middleware but tether's own, as
``tether mcp``) plain calls take the direct path; in the other mode a middleware of the test's
makes every call go through the SDK. The ``where`` tool reports which path ran it, so each test
knows which one it exercised.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import text_of
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from stdio_driver import StdioDriver, source_env

pytestmark = pytest.mark.timeout(90)

PROBE = str(Path(__file__).with_name("stdio_probe_server.py"))
KINDS = ("plain", "error", "empty", "text", "refused", "crash")


def _probe(markers: Path, *, direct: bool) -> StdioDriver:
    argv = [sys.executable, PROBE, str(markers), *(["direct"] if direct else [])]
    return StdioDriver(argv, source_env())


def _start(driver: StdioDriver, version: str = "2025-06-18") -> None:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    driver.request(0, "initialize", params)
    assert driver.response(0)["result"]["protocolVersion"] == version
    driver.notify("notifications/initialized")


@contextlib.contextmanager
def _serving(markers: Path, *, direct: bool = True, version: str = "2025-06-18") -> Iterator[StdioDriver]:
    """The probe, past the handshake (closed and reaped on the way out)."""
    driver = _probe(markers, direct=direct)
    try:
        _start(driver, version)
        yield driver
    finally:
        driver.close()


def _hang(driver: StdioDriver, rid: int) -> None:
    """Call ``hang`` and return once its handler runs."""
    driver.request(rid, "tools/call", {"name": "hang", "arguments": {}})
    driver.recv_until(lambda m: m.get("params", {}).get("data") == "hang started")


def _call(driver: StdioDriver, rid: Any, name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    driver.request(rid, "tools/call", params)
    return driver.response(rid)


def _where(driver: StdioDriver, rid: Any, **extra: Any) -> str:
    result = _call(driver, rid, "where", {}, **extra)["result"]
    return str(result["content"][0]["text"])


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_both_paths_give_the_same_answers_on_every_protocol_version(tmp_path: Path, version: str) -> None:
    answers: dict[str, list[dict[str, Any]]] = {}
    for direct in (True, False):
        with _serving(tmp_path / ("direct" if direct else "sdk"), direct=direct, version=version) as driver:
            assert _where(driver, 1) == ("direct" if direct else "sdk")
            got = [_call(driver, 10, tool, {"kind": kind}) for tool in ("shape", "typed") for kind in KINDS]
            got.append(_call(driver, 11, "no_such_tool", {}))
            answers["direct" if direct else "sdk"] = got
    assert answers["direct"] == answers["sdk"]
    texts = [a["result"]["content"][0]["text"] for a in answers["direct"]]
    assert texts[4] == "INVALID_ARGUMENT: kind 'refused' is refused; use another kind"
    assert texts[5].startswith("INTERNAL: tool shape failed unexpectedly")
    assert texts[-1].startswith("NOT_FOUND: unknown tool 'no_such_tool'")
    plain = answers["direct"][0]["result"]
    assert plain == {
        "content": [{"type": "text", "text": "héllo ✓\n"}],
        "isError": False,
        "structuredContent": {"a": None, "b": [1, 2.5, "x"], "c": {"d": True}},
    }


def test_a_plain_call_goes_the_direct_path_and_anything_else_to_the_sdk(tmp_path: Path) -> None:
    driver = _probe(tmp_path, direct=True)
    try:
        # Before initialize: the SDK's gate answers, as it always did.
        driver.request(1, "tools/call", {"name": "where", "arguments": {}})
        assert "error" in driver.response(1)
        _start(driver)
        assert _where(driver, 2) == "direct"
        assert _where(driver, "a-string-id") == "direct"
        assert _where(driver, 3, _meta={"progressToken": "p1"}) == "direct"
        assert _call(driver, 4, "where")["result"]["content"][0]["text"] == "direct"  # no arguments
        assert _where(driver, 5, _meta={"progressToken": 1, "other": True}) == "sdk"
        # Unusable arguments: the SDK path's named tool error, unchanged.
        refused = _call(driver, 7, "where", [1, 2])["result"]
        assert refused["isError"] and "'arguments' must be a JSON object" in refused["content"][0]["text"]
    finally:
        driver.close()


def test_a_result_json_cannot_carry_is_answered_with_an_error(tmp_path: Path) -> None:
    with _serving(tmp_path) as driver:
        answer = _call(driver, 2, "shape", {"kind": "surrogate"})
        assert answer["error"]["code"] == -32603 and "cannot be encoded as JSON" in answer["error"]["message"]
        assert _where(driver, 3) == "direct"  # and it keeps serving


def test_a_call_through_added_middleware_never_takes_the_direct_path(tmp_path: Path) -> None:
    with _serving(tmp_path, direct=False) as driver:
        assert _where(driver, 2) == "sdk"


def test_a_cancelled_direct_call_is_cancelled_and_never_answered(tmp_path: Path) -> None:
    with _serving(tmp_path) as driver:
        _hang(driver, 5)
        # "5" names request 5, as on the SDK's path.
        driver.notify("notifications/cancelled", {"requestId": "5", "reason": "changed my mind"})
        seen = driver.recv_until(lambda m: m.get("params", {}).get("data") == "hang cancelled")
        driver.request(6, "tools/call", {"name": "where", "arguments": {}})
        seen += driver.recv_until(lambda m: m.get("id") == 6)
        assert 5 not in [m.get("id") for m in seen]
        assert seen[-1]["result"]["content"][0]["text"] == "direct"  # and it keeps serving
        assert (tmp_path / "order").read_text() == "cancelled\n"


def test_the_client_leaving_cancels_a_direct_call_before_the_conversation_ends(tmp_path: Path) -> None:
    with _serving(tmp_path) as driver:
        _hang(driver, 5)
        driver.close_stdin()
        assert driver.wait() == 0
    # The handler's cleanup (0.2 s) ran to its end before the conversation's end hook.
    assert (tmp_path / "order").read_text() == "cancelled\nended\n"


def _params(markers: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[PROBE, str(markers), "direct"], env=source_env()
    )


async def test_the_person_at_the_client_is_asked_during_a_direct_call(tmp_path: Path) -> None:
    asked: list[str] = []

    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        assert params.requested_schema["required"] == ["approve"]
        return types.ElicitResult(action="accept", content={"approve": True, "reason": " fine by me "})

    async with Client(_params(tmp_path), elicitation_callback=elicit) as client:
        assert text_of(await client.call_tool("where", {})) == "direct"
        result = await client.call_tool("confirm", {})
        assert text_of(result) == "approved fine by me"
        assert result.structured_content == {"who": "person at mcp (conv-probe)"}
    assert asked == ["Run the probe?"]
    async with Client(_params(tmp_path / "other")) as client:  # no elicitation declared
        assert text_of(await client.call_tool("confirm", {})) == "nobody to ask"
