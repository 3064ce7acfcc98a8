"""Many concurrent conversations against one ``tether serve``: each opens a shell and runs in it.

Every client is the official MCP SDK over streamable HTTP, in its own conversation, started at the
same moment: ``shell_open`` then ``shell_run echo`` with an exit wait. The figure is how many of
them succeed, and how the failures read. ``--load N`` runs ``stress-ng --cpu N`` meanwhile (the
machine loaded), ``--clients`` sets the count (default 200); the shells start with an empty ``HOME``
(``--user-rc`` keeps yours). ``[sessions] max_sessions`` is raised
to fit them (the default, 8, is a per-home limit a deployment sets; with it 192 of 200 opens are
refused with MAX_SESSIONS, by design).

Run: .venv/bin/python bench/clients.py [--clients 200] [--load 2] [--port 9850]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TETHER = str(Path(sys.executable).parent / "tether")


async def one_client(url: str, token: str, n: int, start: asyncio.Event) -> tuple[str, float]:
    """('ok' | the error's code and first words, seconds from the start signal)."""
    await start.wait()
    t0 = time.monotonic()
    try:
        async with (
            create_mcp_http_client(
                headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(300.0)
            ) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            task = dict((opened.structured_content or {}).get("tasks", [{}])[0])
            if not task.get("ok"):
                return f"open: {task.get('errorCode')} {str(task.get('error'))[:60]}", time.monotonic() - t0
            shell = task["shell"]
            ran = await client.call_tool(
                "shell_run",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "run", "command": f"echo client-{n}"},
                            "wait": {"kind": "exit", "timeoutMs": 120000},
                        }
                    ]
                },
            )
            out: dict[str, Any] = dict((ran.structured_content or {}).get("tasks", [{}])[0])
            if out.get("exitCode") == 0 and (out.get("lines") or [""])[0] == f"client-{n}":
                return "ok", time.monotonic() - t0
            return f"run: {out.get('errorCode')} {str(out.get('error') or out.get('lines'))[:60]}", (
                time.monotonic() - t0
            )
    except Exception as exc:  # a client-side failure is a figure too
        return f"client: {type(exc).__name__} {str(exc)[:60]}", time.monotonic() - t0


def wait_ready(url: str, home: Path, deadline: float) -> str:
    """The server's token, once it answers HTTP (any status but a 5xx)."""
    while time.monotonic() < deadline:
        token_file = home / "token"
        if token_file.exists():
            token = token_file.read_text().strip()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url.removesuffix("/mcp") + "/", timeout=1.0).status_code < 500:
                    return token
        time.sleep(0.1)
    raise SystemExit("tether serve did not answer")


async def run_clients(url: str, token: str, clients: int) -> tuple[list[tuple[str, float]], float]:
    start = asyncio.Event()
    tasks = [asyncio.ensure_future(one_client(url, token, n, start)) for n in range(clients)]
    t0 = time.monotonic()
    start.set()
    results = await asyncio.gather(*tasks)
    return list(results), time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--load", type=int, default=2, help="stress-ng --cpu N while the clients run (0: none)")
    ap.add_argument("--port", type=int, default=9850)
    ap.add_argument("--user-rc", action="store_true", help="keep HOME (the shells run your ~/.bashrc)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="thb-", dir="/tmp"))
    (home / "config.toml").write_text(f"[sessions]\nmax_sessions = {args.clients + 8}\n")
    env = {k: v for k, v in os.environ.items() if k != "TETHER_CONVERSATION"}
    env["TETHER_HOME"] = str(home)
    if not args.user_rc:
        # As bench/sessions.py: an empty HOME, so the figure is tether's, not a .bashrc's (pyenv's
        # start-up forks cost ~0.5 s of CPU per shell, 100 s for 200 shells on 2 cores).
        (home / "user").mkdir()
        env["HOME"] = str(home / "user")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    serve = subprocess.Popen([TETHER, "serve", "--port", str(args.port)], env=env, **quiet)  # type: ignore[call-overload]
    stress: subprocess.Popen[bytes] | None = None
    try:
        url = f"http://127.0.0.1:{args.port}/mcp"
        token = wait_ready(url, home, time.monotonic() + 30)
        if args.load and shutil.which("stress-ng"):
            stress = subprocess.Popen(["stress-ng", "--cpu", str(args.load), "--quiet"], **quiet)  # type: ignore[call-overload]
        results, wall = asyncio.run(run_clients(url, token, args.clients))
        kinds = collections.Counter(kind for kind, _ in results)
        ok = [t for kind, t in results if kind == "ok"]
        load = f"stress-ng --cpu {args.load}" if stress is not None else "no extra load"
        print(f"{args.clients} concurrent clients (open + run), {load}: {kinds['ok']} ok in {wall:.1f} s")
        if ok:
            print(f"  per client: p50 {statistics.median(ok):.2f} s, max {max(ok):.2f} s")
        for kind, count in kinds.most_common():
            if kind != "ok":
                print(f"  {count} × {kind}")
    finally:
        if stress is not None:
            os.killpg(stress.pid, signal.SIGTERM)
            stress.wait()
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)
        sock = str(home / "tmux.sock")
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
