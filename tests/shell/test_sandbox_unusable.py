"""A machine where bubblewrap cannot build a sandbox: each confined call is one clear refusal.

Most users are not root, and a user other than root needs unprivileged user namespaces for
bubblewrap. Where the machine forbids them, ``tether mcp --sandbox`` answered a one-shot command
with bubblewrap's own line as the command's stderr and exit code 1 (``echo hi`` "failed"), and
opened a confined shell "ok" that was dead at once (its next run said its bash had ended). Both are
now ``SHELL_SPAWN`` naming the setting that forbids it and the fix, and nothing runs unconfined.
The server runs under ``tests/no_userns.py``: as a user other than root, in a user namespace whose
``user.max_user_namespaces`` is 0.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

TETHER = str(Path(sys.executable).parent / "tether")
NO_USERNS = str(Path(__file__).resolve().parents[1] / "no_userns.py")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None,
    reason="forbidding user namespaces to one process tree needs root, and the sandbox needs bwrap",
)


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_machine_that_forbids_user_namespaces_refuses_confined_calls_saying_why(
    tether_home: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    params = StdioServerParameters(
        command=sys.executable, args=[NO_USERNS, TETHER, "mcp", "--sandbox"], env=env, cwd=str(work)
    )
    async with Client(params) as client:
        ran = await client.call_tool("bash", {"command": "echo ran > ran.txt", "description": "probe"})
        assert ran.is_error, _text(ran)
        text = _text(ran)
        assert text.startswith("SHELL_SPAWN: the sandbox cannot start on this machine"), text
        assert "user.max_user_namespaces is 0" in text and "without the sandbox" in text, text
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        assert opened.structured_content is not None
        task = opened.structured_content["tasks"][0]
        assert (task["ok"], task["errorCode"], task["shell"]) == (False, "SHELL_SPAWN", None), task
        assert "user.max_user_namespaces is 0" in task["error"], task
        listed = await client.call_tool("shell_state", {})
        assert "dsh-" not in _text(listed), _text(listed)
    assert not (work / "ran.txt").exists()
