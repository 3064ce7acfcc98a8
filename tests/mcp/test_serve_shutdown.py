"""``tether serve`` stopped ends every command it runs, also where no command container ends them
for it (a tether that may not create namespaces: here root without ``CAP_SYS_ADMIN``): SIGHUP (the
terminal it was started from closed) stops it as SIGTERM and Ctrl+C do, and a shutdown that the
watchdog cuts short still kills what its commands left. A call the stop cancels is audited as
ended by it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from mcp_harness import http_client

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg
from serve_banner import banner_field, read_banner

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="running tether without CAP_SYS_ADMIN needs root and setpriv",
    ),
]

TETHER = str(Path(sys.executable).parent / "tether")


@contextmanager
def _uncontained_serve(
    home: Path, *, grace_ms: int = 3_000
) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    (home / "config.toml").write_text(f"[shell]\ngrace_ms = {grace_ms}\n")
    env = {**os.environ, "TETHER_HOME": str(home)}
    process = subprocess.Popen(
        ["setpriv", "--bounding-set=-sys_admin", TETHER, "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = read_banner(process.stdout)
        url, token = banner_field(banner, "URL"), banner_field(banner, "token")
        yield url, token, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _log(home: Path) -> str:
    return (home / "logs" / "serve.log").read_text(errors="replace")


async def _job_then_stop(home: Path, sig: signal.Signals, *, grace_ms: int = 3_000) -> list[int]:
    """Start a job that ignores SIGTERM and SIGHUP, stop the server with ``sig`` while its client is
    still connected, wait for it to exit; what is left of the job."""
    sleep_arg = unique_sleep_arg()
    left: list[int] = []
    try:
        with _uncontained_serve(home, grace_ms=grace_ms) as (url, token, process):
            with contextlib.suppress(Exception):  # leaving a client whose server is gone may raise
                async with http_client(url, token=token) as client:
                    arguments = {
                        "command": f"(trap '' TERM HUP; exec sleep {sleep_arg}) & wait",
                        "description": "a job that ignores SIGTERM and SIGHUP",
                        "run_in_background": True,
                    }
                    assert not (await client.call_tool("bash", arguments)).is_error
                    with anyio.fail_after(HANG_S):
                        while not alive_with(sleep_arg):
                            await anyio.sleep(0.01)
                    assert "commands run without a container" in _log(home)
                    process.send_signal(sig)
                    await anyio.to_thread.run_sync(lambda: process.wait(HANG_S))
                    left = alive_with(sleep_arg)
            assert process.poll() is not None
        return left
    finally:
        kill_all(alive_with(sleep_arg))


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
async def test_a_stopped_serve_ends_its_jobs(tether_home: Path, sig: signal.Signals) -> None:
    assert await _job_then_stop(tether_home, sig) == []


async def test_a_shutdown_the_watchdog_cuts_short_still_ends_its_jobs(tether_home: Path) -> None:
    # The job's grace outlasts the watchdog's 10 s: the shutdown is still waiting for it then.
    assert await _job_then_stop(tether_home, signal.SIGTERM, grace_ms=600_000) == []


async def test_a_stopped_serve_audits_the_calls_in_flight_as_ended_by_its_signal(
    tether_home: Path, tmp_path: Path
) -> None:
    # Audited "the caller cancelled the call", as if its client had cancelled it.
    sleep_arg = unique_sleep_arg()
    try:
        # The client's call ends with its server, in an error.
        with _uncontained_serve(tether_home) as (url, token, process), contextlib.suppress(Exception):
            async with http_client(url, token=token) as client, anyio.create_task_group() as tg:
                bash = {"command": f"touch {tmp_path}/started; sleep {sleep_arg}", "description": "x"}
                tg.start_soon(client.call_tool, "bash", bash)
                with anyio.fail_after(HANG_S):
                    while not (tmp_path / "started").exists():
                        await anyio.sleep(0.01)
                process.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(lambda: process.wait(HANG_S))
        records = [
            json.loads(line)
            for path in sorted((tether_home / "audit").glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        (record,) = [r for r in records if r["tool"] == "bash"]
        assert record["outcome"] == "cancelled" and record["extra"]["cause"] == "server-stopped", record
        assert record["detail"] == "the server was stopped (SIGTERM to tether)"
    finally:
        kill_all(alive_with(sleep_arg))
