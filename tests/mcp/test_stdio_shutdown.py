"""``tether mcp`` told to stop ends every command of its conversation, also where no command
container ends them for it: a tether that may not create namespaces (most installs that do not
run as root; here: root without ``CAP_SYS_ADMIN``). Two stops an MCP client gives: closing stdin
and, two seconds later, SIGTERM (the SDK's client), which must not cut the shutdown short; and a
SIGTERM alone, after which the client waits two more seconds before SIGKILL — no time to wait
out a long grace for a command that ignores SIGTERM. Each call in flight is audited as ended by
what ended it: the stop signal, or the client leaving.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from stdio_driver import TETHER, StdioDriver, tether_env

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="running tether without CAP_SYS_ADMIN needs root and setpriv",
    ),
]

# A grace no test waits out: the server must not wait for it once it is told to stop.
_LONG_GRACE_MS = 600_000


@contextmanager
def _uncontained_server(home: Path) -> Iterator[StdioDriver]:
    (home / "config.toml").write_text(f"[shell]\ngrace_ms = {_LONG_GRACE_MS}\n")
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    driver = StdioDriver(["setpriv", "--bounding-set=-sys_admin", TETHER, "mcp"], tether_env(home, **extra))
    try:
        driver.initialize()
        yield driver
    finally:
        driver.close()


def _log(home: Path) -> str:
    path = home / "logs" / "mcp.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _start_job(driver: StdioDriver, token: str) -> None:
    arguments = {
        "command": f"(trap '' TERM; exec sleep {token}) & wait",
        "description": "a job that ignores SIGTERM",
        "run_in_background": True,
    }
    driver.request(2, "tools/call", {"name": "bash", "arguments": arguments})
    answer = driver.response(2)
    assert answer["result"]["structuredContent"]["kind"] == "background", answer
    assert wait_until(lambda: alive_with(token) != [])


async def test_sigterm_during_the_shutdown_after_stdin_closed_still_ends_every_job(tether_home: Path) -> None:
    token = unique_sleep_arg()
    try:
        with _uncontained_server(tether_home) as server:
            _start_job(server, token)
            assert "commands run without a container" in _log(tether_home)
            server.close_stdin()
            # The conversation is over and the jobs are being ended (this one waits out its grace).
            assert wait_until(lambda: "stdio client closed the connection" in _log(tether_home))
            os.kill(server.proc.pid, signal.SIGTERM)
            server.wait(HANG_S)
            assert alive_with(token) == []
    finally:
        kill_all(alive_with(token))


async def test_sigterm_ends_a_job_that_ignores_it_without_waiting_out_the_grace(tether_home: Path) -> None:
    token = unique_sleep_arg()
    try:
        with _uncontained_server(tether_home) as server:
            _start_job(server, token)
            os.kill(server.proc.pid, signal.SIGTERM)
            server.wait(HANG_S)  # not the 600 s grace: a client SIGKILLs a server 2 s after SIGTERM
            assert alive_with(token) == []
    finally:
        kill_all(alive_with(token))


def _records(home: Path, *tools: str) -> dict[str, dict[str, Any]]:
    """The audit record of each of ``tools``' calls (one each), by tool name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((home / "audit").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["tool"] in tools:
                found[record["tool"]] = record
    return found


def _verify(home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run([TETHER, "audit", "verify"], env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda sig: sig.name)
def test_a_stop_signal_audits_the_calls_in_flight_as_ended_by_it(
    tether_home: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    # The calls in flight were left to the exit: not audited at all (a shell_run), or audited
    # "ok" (a one-shot command the shutdown killed), instead of "cancelled" by the stop.
    token = unique_sleep_arg()
    try:
        with _uncontained_server(tether_home) as server:
            server.request(
                2,
                "tools/call",
                {"name": "shell_open", "arguments": {"tasks": [{"action": {"kind": "open"}}]}},
            )
            shell = server.response(2)["result"]["structuredContent"]["tasks"][0]["shell"]
            bash = {
                "command": f"touch {tmp_path}/bash; sleep {token}",
                "description": "x",
                "timeoutMs": 600_000,
            }
            server.request(3, "tools/call", {"name": "bash", "arguments": bash})
            run = {
                "target": {"sessions": shell},
                "action": {"kind": "run", "command": f"touch {tmp_path}/run; sleep {token}"},
                "wait": {"kind": "exit", "timeoutMs": 600_000},
            }
            server.request(4, "tools/call", {"name": "shell_run", "arguments": {"tasks": [run]}})
            assert wait_until(lambda: (tmp_path / "bash").exists() and (tmp_path / "run").exists())
            os.kill(server.proc.pid, sig)
            assert server.wait(HANG_S) == 128 + sig
        records = _records(tether_home, "bash", "shell_run")
        for tool in ("bash", "shell_run"):
            assert tool in records, f"the {tool} call in flight was not audited"
            record = records[tool]
            assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "server-stopped", record
            assert record["detail"] == f"the server was stopped ({sig.name} to tether)"
        verify = _verify(tether_home)
        assert verify.returncode == 0 and "intact" in verify.stdout, verify.stdout + verify.stderr
        env = {**os.environ, "TETHER_HOME": str(tether_home)}
        show = subprocess.run([TETHER, "audit", "show"], env=env, capture_output=True, text=True, check=True)
        lines = [line for line in show.stdout.splitlines() if " bash run " in line]
        assert (
            len(lines) == 1 and f"cancelled [server-stopped] (the server was stopped ({sig.name}" in lines[0]
        )
    finally:
        kill_all(alive_with(token))


_CLIENT = """
import sys, anyio
from mcp import Client, StdioServerParameters
import json

async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"], env=json.loads(sys.argv[2]))
    async with Client(params) as client:
        await client.call_tool("bash", {"command": sys.argv[3], "description": "x", "timeoutMs": 600000})

anyio.run(main)
"""


def test_a_call_whose_stdio_client_was_killed_is_audited_as_the_client_leaving(
    tether_home: Path, tmp_path: Path
) -> None:
    # The official client in a process of its own, SIGKILLed mid-call: tether mcp sees its stdin
    # close; the call was audited "the caller cancelled the call", as if the client had asked.
    token = unique_sleep_arg()
    env = json.dumps(tether_env(tether_home))
    command = f"touch {tmp_path}/started; sleep {token}"
    client = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, TETHER, env, command], stdin=subprocess.DEVNULL, env=os.environ
    )
    try:
        assert wait_until(lambda: (tmp_path / "started").exists())
        client.kill()
        client.wait()
        assert wait_until(lambda: "bash" in _records(tether_home, "bash"))
        record = _records(tether_home, "bash")["bash"]
        assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "client-left", record
        assert record["detail"] == "the MCP client left during the call (its stdin closed)"
        assert wait_until(lambda: alive_with(token) == [])  # its command ended with it
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        kill_all(alive_with(token))
