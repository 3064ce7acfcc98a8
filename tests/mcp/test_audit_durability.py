"""An acknowledged tool call's audit record is on disk before the client hears the result.

Two proofs through a real ``tether mcp`` and the official client: the server's own system calls
(strace) show the record's ``fsync`` returning before the response is written to stdout; and a
server SIGKILLed the moment the reply arrives leaves that record in an intact chain.
"""

from __future__ import annotations

import re
import secrets
import shutil
import signal
from pathlib import Path

import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import text_of
from stdio_driver import TETHER, tether_env

from tether.audit import query, verify

pytestmark = pytest.mark.timeout(120)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by `make system`")
async def test_the_record_is_fsynced_before_the_response_is_written(tether_home: Path) -> None:
    trace = tether_home / "server.strace"
    word = "durable-" + secrets.token_hex(4)
    argv = ["-f", "-y", "-s", "400", "-e", "trace=write,fsync,fdatasync", "-o", str(trace), TETHER, "mcp"]
    params = StdioServerParameters(command="strace", args=argv, env=tether_env(tether_home))
    async with Client(params) as client:
        result = await client.call_tool("bash", {"command": f"echo {word}", "description": "x"})
        assert text_of(result) == word
    lines = trace.read_text(errors="replace").splitlines()
    audit_write = next(i for i, line in enumerate(lines) if "/audit/" in line and f"echo {word}" in line)
    fd = re.search(r"write\((\d+)<", lines[audit_write])
    assert fd is not None
    synced = next(
        i
        for i, line in enumerate(lines[audit_write:], audit_write)
        if re.search(rf"(fsync|fdatasync)\({fd.group(1)}<[^>]*/audit/[^>]*>\) += 0", line)
        or ("fsync resumed>" in line and "= 0" in line and _resumes(lines, i, fd.group(1)))
    )
    answered = next(
        i for i, line in enumerate(lines) if "<pipe:" in line and "jsonrpc" in line and word in line
    )
    assert audit_write < synced < answered, (lines[audit_write], lines[synced], lines[answered])


def _resumes(lines: list[str], index: int, fd: str) -> bool:
    """Whether the ``<... fsync resumed>`` at ``index`` finishes an fsync of the audit fd ``fd``."""
    pid = lines[index].split()[0]
    for line in reversed(lines[:index]):
        if line.startswith(pid) and "fsync(" in line and "<unfinished" in line:
            return f"fsync({fd}<" in line and "/audit/" in line
    return False


def _server_of(home: Path) -> psutil.Process:
    """This test's ``tether mcp`` (pytest may hold other children, zombies among them)."""
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.cmdline()[-1:] == ["mcp"] and proc.environ().get("TETHER_HOME") == str(home):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no tether mcp serving {home} among this test's processes")


async def test_a_record_survives_sigkill_right_after_the_reply(tether_home: Path) -> None:
    word = "acked-" + secrets.token_hex(4)
    params = StdioServerParameters(command=TETHER, args=["mcp"], env=tether_env(tether_home))
    answered = False
    with pytest.raises(Exception):  # noqa: B017 - the server dies under the client; any error is fine
        async with Client(params) as client:
            server = _server_of(tether_home)
            result = await client.call_tool("bash", {"command": f"echo {word}", "description": "x"})
            server.send_signal(signal.SIGKILL)  # before anything else can run in the server
            answered = text_of(result) == word
            server.wait(30)
            await client.call_tool("job_list", {})
    assert answered
    records = [r for r in query(tether_home, days=1, limit=100) if r.command == f"echo {word}"]
    assert len(records) == 1 and records[0].outcome == "ok"
    assert verify(tether_home).ok
