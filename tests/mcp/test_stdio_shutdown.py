"""``tether mcp`` told to stop ends every command of its conversation, also where no command
container ends them for it: a tether that may not create namespaces (most installs that do not
run as root; here: root without ``CAP_SYS_ADMIN``). Two stops an MCP client gives: closing stdin
and, two seconds later, SIGTERM (the SDK's client), which must not cut the shutdown short; and a
SIGTERM alone, after which the client waits two more seconds before SIGKILL — no time to wait
out a long grace for a command that ignores SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
