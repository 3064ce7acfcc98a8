"""The door's floor for bench/peers.py: a stdio MCP server that does nothing.

It answers ``initialize``, ``ping``, ``tools/list`` and every ``tools/call`` at once, from a JSON
file holding the tool list and the one result to give (bench/peers.py records tether's own
``shell_run`` result and tool list there), with the standard library only: no SDK on this side.
The official client still validates the result against the tool's output schema. What a call to it
costs is what the client and the pipes cost any server.

Run: python bench/instant_server.py ANSWERS.json
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _result(message: dict[str, Any], answers: dict[str, Any]) -> dict[str, Any]:
    method = message.get("method")
    if method == "initialize":
        return {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "instant", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": answers["tools"]}
    if method == "tools/call":
        result: dict[str, Any] = answers["result"]
        return result
    return {}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        answers = json.load(handle)
    pending = b""
    while chunk := os.read(0, 1 << 16):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "id" in message and "method" in message:
                reply = {"jsonrpc": "2.0", "id": message["id"], "result": _result(message, answers)}
                os.write(1, json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    main()
