"""Masking keeps up with the vault while it is kept between calls: a secret stored by another
process after a call is masked in the very next result, in both content shapes."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import text_of
from stdio_driver import TETHER, tether_env

pytestmark = pytest.mark.timeout(120)

SECRET = "late-secret-Q7x9-zz"


async def test_a_secret_stored_mid_conversation_is_masked_in_the_next_result(tether_home: Path) -> None:
    params = StdioServerParameters(command=TETHER, args=["mcp"], env=tether_env(tether_home))
    command = {"command": f"echo {SECRET}", "description": "print a value"}
    async with Client(params) as client:
        before = await client.call_tool("bash", command)
        assert SECRET in text_of(before)  # not a secret yet
        stored = await anyio.run_process(
            [TETHER, "vault", "set", "LATE"], input=SECRET.encode(), env=tether_env(tether_home), check=False
        )
        assert stored.returncode == 0, stored.stderr
        after = await client.call_tool("bash", command)
        both = text_of(after) + json.dumps(after.structured_content)
        assert SECRET not in both and "[vault:LATE]" in text_of(after)
        audit = "".join(p.read_text() for p in (tether_home / "audit").glob("*.jsonl"))
        assert SECRET in audit  # the first call's command, logged before it was a secret
        assert audit.count(SECRET) == 1  # the second one is masked in the log too
