"""A big, old home against a small one: what a user who has run tether for months pays (figures,
no assertions; see DESIGN.md).

    .venv/bin/python bench/bighome.py [--closed N] [--audit M] [--live K] [--days D] [--port P]

Builds two homes in ``/tmp`` in tether's real formats: a *small* one (20 closed shells, 500 audit
records, 2 live shells) and a *big* one (``--closed`` shells closed over the last ``--days`` days,
each with its record, three runs, a read position, a close snapshot, a log and timing samples; an
audit log of ``--audit`` calls, chained, over the same days, as ``bench/audit.py`` writes it;
``--live`` shells opened through ``tether.Tether``). Then, on each home: ``tether mcp`` start →
``initialize`` → ``tools/list``; a shell ``echo`` (``shell_run``, wait for exit) and ``shell_state
scope='*'`` through the official SDK client; the panel's shell list (``GET /panel/api/shells`` of
``tether serve``); ``tether shell list``; ``tether audit verify``; and retention's first sweep in
process (``retention.sweep``, as the idle sweep calls it), with the longest stall of a 1 ms ticker
running beside it on the same loop (how long a call would have waited behind it). Prints each
figure for both homes and their ratio.

The live shells start with ``HOME`` set to an empty directory (no user rc), as bench/sessions.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit import write_log  # bench/audit.py: the audit log in its real format
from tether.shells.ids import new_shell_id
from tether.shells.records import now_ms  # with the sessions schema
from tether.shells.timing import times_path
from tether.store.db import Store
from tether.store.snapshots import SNAPSHOTS_DIR  # with the snapshots schema

DAY_MS = 86_400_000
PY = sys.executable


def make_home(root: Path, name: str, *, closed: int, audit: int, live: int, days: int) -> Path:
    home = root / name
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("[sessions]\nmax_sessions = 1000\n[cli]\ndoor_idle_seconds = 5\n")
    (home / "user").mkdir()
    now = now_ms()
    store = Store.open(home)
    logs, snaps = home / "logs", home / SNAPSHOTS_DIR
    (logs / "times").mkdir(parents=True, mode=0o700)
    snaps.mkdir(mode=0o700)
    with store.transaction() as conn:
        for i in range(closed):
            sid = new_shell_id()
            closed_ms = now - (days * DAY_MS * (i + 1)) // (closed + 1)
            conn.execute(
                "INSERT INTO shells (id, owner, label, created_ms, cwd, last_activity_ms, "
                "closed_ms, nonce) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    f"conv-{i % 40:04d}",
                    f"build-{i}",
                    closed_ms - 600_000,
                    "/tmp",
                    closed_ms,
                    closed_ms,
                    "n" * 12,
                ),
            )
            for r in range(3):
                conn.execute(
                    "INSERT INTO shell_runs (run_id, shell_id, nonce, command, actor, started_ms, "
                    "log_offset, exit_code, end_offset) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)",
                    (
                        secrets.token_hex(4),
                        sid,
                        "n" * 12,
                        f"make test {r}",
                        "conv",
                        closed_ms - 1000 * r,
                        100 * r,
                        100 * r + 90,
                    ),
                )
            conn.execute(
                "INSERT INTO shell_reads (shell_id, actor, log_offset) VALUES (?, ?, ?)", (sid, "conv", 300)
            )
            (snaps / sid).mkdir(mode=0o700)
            text = f"$ make test\nok {i}\n"
            (snaps / sid / "close.txt").write_text(text)
            conn.execute(
                "INSERT INTO snapshots (shell_id, label, cwd, cols, rows, taken_ms, reason, actor, file, "
                "size, dropped_bytes) VALUES (?, ?, '/tmp', 120, 40, ?, 'close', 'conv', ?, ?, 0)",
                (sid, f"build-{i}", closed_ms, f"{sid}/close.txt", len(text)),
            )
            (logs / f"{sid}.log").write_bytes(b"$ make test\r\nok\r\n" * 40)
            times_path(logs, sid).write_bytes(b"\0" * 64)
    store.close()
    if audit:
        write_log(home, audit, days)
    if live:
        env_home = os.environ.get("HOME")
        os.environ["HOME"] = str(home / "user")
        try:
            asyncio.run(_open_live(home, live))
        finally:
            if env_home is not None:
                os.environ["HOME"] = env_home
    return home


async def _open_live(home: Path, live: int) -> None:
    from tether import Tether

    async with Tether(home=home, conversation="conv-bench") as t:
        left = live
        while left:
            n = min(left, 10)
            result = await t.call("shell_open", {"tasks": [{"action": {"kind": "open", "count": n}}]})
            if result.is_error:
                raise SystemExit(f"shell_open failed: {result.text}")
            left -= n


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_HOME"] = str(home)
    env["HOME"] = str(home / "user")
    return env


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def mcp_figures(home: Path, rounds: int, quiet: TextIO) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=PY, args=["-m", "tether", "mcp"], env=env_for(home))
    starts: list[float] = []
    for _ in range(3):
        t0 = time.perf_counter()
        async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            await s.list_tools()
            starts.append(time.perf_counter() - t0)
    out = {"start → initialize → tools/list": p50(starts)}
    async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        opened = await s.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        run = {
            "tasks": [
                {
                    "target": {"sessions": shell},
                    "action": {"kind": "run", "command": "echo hi"},
                    "wait": {"kind": "exit"},
                }
            ]
        }

        async def timed(name: str, args: dict[str, Any]) -> float:
            t0 = time.perf_counter()
            res = await s.call_tool(name, args)
            if res.is_error:
                raise SystemExit(f"{name} failed: {res.content}")
            return time.perf_counter() - t0

        await timed("shell_run", run)
        out["shell echo"] = p50([await timed("shell_run", run) for _ in range(rounds)])
        out["shell_state scope='*'"] = p50(
            [await timed("shell_state", {"scope": "*"}) for _ in range(rounds)]
        )
        out["shell_state (mine)"] = p50([await timed("shell_state", {}) for _ in range(rounds)])
        await s.call_tool(
            "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
    return out


def cli_figure(home: Path, *argv: str, times: int = 3) -> float:
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        subprocess.run([PY, "-m", "tether", *argv], env=env_for(home), capture_output=True, check=False)
        took.append(time.perf_counter() - t0)
    return p50(took)


def panel_figure(home: Path, port: int, rounds: int) -> float:
    import httpx2 as httpx

    quiet: dict[str, Any] = {
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "start_new_session": True,
    }
    serve = subprocess.Popen([PY, "-m", "tether", "serve", "--port", str(port)], env=env_for(home), **quiet)
    try:
        deadline = time.monotonic() + 60
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() < deadline:
            if (home / "token").exists():
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/", timeout=1.0).status_code < 500:
                        break
            time.sleep(0.2)
        token = (home / "token").read_text().strip()
        with httpx.Client(base_url=base, follow_redirects=True, timeout=60) as client:
            client.get("/panel/login", params={"token": token})
            took = []
            for _ in range(rounds + 1):
                t0 = time.perf_counter()
                got = client.get("/panel/api/shells")
                if got.status_code != 200:
                    raise SystemExit(f"panel list: {got.status_code} {got.text[:200]}")
                took.append(time.perf_counter() - t0)
        return p50(took[1:])
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            serve.wait(timeout=30)


async def retention_figure(home: Path) -> tuple[float, float, int]:
    """The first sweep over the home (seconds), the longest stall of a ticker beside it (ms), and
    how many shells it removed."""
    from tether.config import load_config
    from tether.shells import Shells, retention

    shells = Shells(load_config(home))
    for host in shells.hosts.values():
        host.start()
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    removed = await retention.sweep(shells, int(time.time() * 1000))
    took = time.perf_counter() - t0
    done = True
    await tick
    await shells.close()
    return took, longest * 1000, len(removed)


def measure(home: Path, port: int, rounds: int) -> dict[str, float]:
    # Retention first: a server's own first sweep (a second after its start) would take the hour.
    took, stall, removed = asyncio.run(retention_figure(home))
    with open(os.devnull, "w") as quiet:  # the servers' log lines are not figures
        out = asyncio.run(mcp_figures(home, rounds, quiet))
    out["panel GET /panel/api/shells"] = panel_figure(home, port, rounds)
    out["tether shell list"] = cli_figure(home, "shell", "list")
    out["tether audit verify"] = cli_figure(home, "audit", "verify", times=1)
    out["retention first sweep"] = took * 1000
    out["  longest loop stall in it"] = stall
    out["  shells it removed"] = removed
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--closed", type=int, default=3000)
    parser.add_argument("--audit", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--port", type=int, default=9420)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="th-scale-bench-", dir="/tmp"))
    homes: list[Path] = []
    try:
        t0 = time.perf_counter()
        homes.append(make_home(root, "small", closed=20, audit=500, live=2, days=args.days))
        homes.append(
            make_home(root, "big", closed=args.closed, audit=args.audit, live=args.live, days=args.days)
        )
        print(
            f"homes built in {time.perf_counter() - t0:.1f} s; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        small = measure(homes[0], args.port, args.rounds)
        big = measure(homes[1], args.port + 1, args.rounds)
        print(
            f"\n{'figure (ms unless a count)':38} {'small':>10} {'big':>10} {'ratio':>7}\n"
            f"{'':38} {'20/500/2':>10} {f'{args.closed}/{args.audit}/{args.live}':>10}"
        )
        for key, value in small.items():
            ratio = big[key] / value if value else float("nan")
            print(f"{key:38} {value:10.1f} {big[key]:10.1f} {ratio:6.1f}×")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        for home in homes:
            end_processes_of(home)
            subprocess.run(
                ["tmux", "-S", str(home / "tmux.sock"), "kill-server"], capture_output=True, check=False
            )
        shutil.rmtree(root, ignore_errors=True)


def end_processes_of(home: Path) -> None:
    """The command line's tools process (it lingers for its next command) and anything else of
    ``home``'s left: ended before its tmux server, whose sweep would start that server again."""
    import psutil

    mine = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get("TETHER_HOME") == str(home):
                mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    psutil.wait_procs(mine, timeout=10)


if __name__ == "__main__":
    main()
