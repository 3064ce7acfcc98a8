"""A long-lived server under a mixed workload: what grows, and does it come back?

Two modes.

**Servers** (the default): one ``tether serve`` (MCP over HTTP and the panel) and one ``tether mcp``
(stdio), on one fresh ``TETHER_HOME``, for ``--minutes``. Two clients of the official MCP SDK drive
them at once, cycle after cycle:

- the HTTP client: one-shot commands (a short one, a failing one, one past its deadline that is
  promoted to a job and killed, a background job read to its end with ``job_output``, one with more
  output than the memory budget, so spilled), a client that disconnects in the middle of a
  ``bash`` call, the panel's event WebSocket and a terminal WebSocket on a shell left open (closed
  cleanly or dropped), then the shell cycle below;
- the stdio client: the shell cycle only.

The shell cycle opens two shells, runs in each, types into ``cat`` and interrupts it, reads, runs
a command with a vault reference (its value must come back masked), renames one, snapshots it and
closes both; every fifth cycle one shell is left open (up to ``--keep-open``), every tenth one
reopens a closed shell from its snapshot. ``stress-ng --cpu 2`` runs over the middle third of the
run (``--stress 0`` for none).

Every ``--interval`` seconds it samples, for both server processes: RSS and USS, threads,
descriptors by kind, children and zombies; tmux's servers, sessions and panes on the home's socket;
``tether.db`` and its WAL, the audit log, and each directory of the home (files, bytes on disk);
and the p50 of five one-shot ``echo`` calls over HTTP. At the end it prints the table and the slope
of each figure per 100 cycles over the samples after the first ``--warmup`` minutes.

**Library** (``--library --cycles N``): the same shell and one-shot cycles in this process through
``tether.Tether`` (the same tool registry), with ``tracemalloc`` snapshots after ``--warmup-cycles``
and at the end, diffed by line (the lines that grew most, and how many blocks they hold), and the
growth of ``gc`` objects by type and of asyncio tasks. Caches that tether bounds are cleared before
each snapshot (``--keep-caches`` keeps them), so what is left is what a cycle leaves for good.

It prints figures and asserts nothing. Run:

    .venv/bin/python bench/soak.py --minutes 15 [--port 9650] [--interval 30] [--stress 2]
    .venv/bin/python bench/soak.py --library --cycles 300 [--warmup-cycles 50]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TETHER = str(Path(sys.executable).parent / "tether")
SECRET = "soak-secret-Zq81xV"
Call = Callable[[str, dict[str, Any]], Awaitable[tuple[dict[str, Any], str, bool]]]


# ---------------------------------------------------------------- the workload


class Counts:
    """What the workload did, and what surprised it (a figure, not a failure)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.odd: collections.Counter[str] = collections.Counter()
        self.cycles = 0
        self.left_open: list[str] = []
        self.last_closed = ""  # a closed shell with a snapshot, to reopen from

    def note(self, what: str) -> None:
        self.odd[what[:90]] += 1


def _tasks(shells: list[str], action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tasks": [{"target": {"sessions": s}, "action": action, **extra} for s in shells]}


async def shell_cycle(call: Call, n: int, counts: Counts, keep_open: int, tag: str) -> None:
    opened, text, _ = await call(
        "shell_open", {"tasks": [{"action": {"kind": "open", "count": 2, "label": f"{tag}{n}"}}]}
    )
    shells = [t["shell"] for t in opened.get("tasks", []) if t.get("ok")]
    if len(shells) != 2:
        counts.note(f"open: {text[:80]}")
        if not shells:
            return
    ran, text, _ = await call(
        "shell_run",
        _tasks(shells, {"kind": "run", "command": f"echo run-{n}; ls / >/dev/null"}, wait={"kind": "exit"}),
    )
    if not all(t.get("exitCode") == 0 for t in ran.get("tasks", [])):
        counts.note(f"run: {text[:80]}")
    first = [shells[0]]
    await call("shell_send", _tasks(first, {"kind": "send", "text": "cat", "keys": ["Enter"]}))
    await call("shell_send", _tasks(first, {"kind": "send", "text": f"typed-{n}", "keys": ["Enter"]}))
    await call("shell_send", _tasks(first, {"kind": "send", "text": "", "keys": ["C-c"]}))
    await call("shell_read", _tasks(shells, {"kind": "read", "mode": "tail"}))
    vault, text, _ = await call(
        "shell_run",
        _tasks(first, {"kind": "run", "command": "echo v={{vault.SOAK_SECRET}}"}, wait={"kind": "exit"}),
    )
    if SECRET in text or SECRET in json.dumps(vault):
        counts.note("vault value came back unmasked")
    await call("shell_manage", _tasks(first, {"kind": "rename", "newName": f"{tag}-renamed-{n}"}))
    await call("shell_manage", _tasks(first, {"kind": "snapshot"}))
    to_close = shells
    if n % 5 == 4 and len(counts.left_open) < keep_open:
        counts.left_open.append(shells[1])
        to_close = shells[:1]
    closed, text, _ = await call("shell_manage", _tasks(to_close, {"kind": "close"}))
    if not all(t.get("ok") for t in closed.get("tasks", [])):
        counts.note(f"close: {text[:80]}")
    counts.last_closed = shells[0]
    if n % 10 == 9:
        old = counts.last_closed
        again, text, _ = await call("shell_open", {"tasks": [{"action": {"kind": "open", "from": old}}]})
        revived = [t["shell"] for t in again.get("tasks", []) if t.get("ok")]
        if not revived:
            counts.note(f"open from: {text[:80]}")
        else:
            await call("shell_manage", _tasks(revived, {"kind": "close"}))
    counts.calls["shell cycle"] += 1


async def oneshot_cycle(call: Call, n: int, counts: Counts) -> None:
    def bash(command: str, **extra: Any) -> Awaitable[tuple[dict[str, Any], str, bool]]:
        return call("bash", {"command": command, "description": "soak", **extra})

    await bash(f"echo one-{n}")
    failed, _, _ = await bash("echo failing >&2; exit 3")
    if failed.get("exitCode") != 3:
        counts.note(f"failing: {failed.get('exitCode')}")
    promoted, text, _ = await bash("echo begun; sleep 60", timeoutMs=200)
    job = promoted.get("jobId")
    if job:
        await call("job_kill", {"jobId": job, "reason": "soak: promoted"})
    else:
        counts.note(f"promote: {text[:80]}")
    background, text, _ = await bash("for i in 1 2 3; do echo $i; sleep 0.05; done", run_in_background=True)
    job = background.get("jobId")
    if job:
        for _ in range(50):
            read, _, _ = await call("job_output", {"jobId": job, "timeoutMs": 5000})
            if read.get("status") not in ("starting", "running"):
                break
    spilled, _, _ = await bash("head -c 300000 /dev/zero | tr '\\0' x; echo")
    if not (spilled.get("stdout") or {}).get("spillPath"):
        counts.note("no spill path")
    counts.calls["oneshot cycle"] += 1


# ---------------------------------------------------------------- sampling /proc and the home


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def proc_figures(pid: int) -> dict[str, float]:
    status = dict(line.split(":", 1) for line in _read(f"/proc/{pid}/status").splitlines() if ":" in line)
    rollup = {}
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines()[1:]:
        key, _, rest = line.partition(":")
        with contextlib.suppress(ValueError, IndexError):
            rollup[key] = int(rest.split()[0])
    kinds: collections.Counter[str] = collections.Counter()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(("socket:", "pipe:")):
                    kinds[target.split(":")[0]] += 1
                elif target.startswith("anon_inode:"):
                    kinds[target.split(":", 1)[1].strip("[]")] += 1
                elif target.startswith("/dev/"):
                    kinds["dev"] += 1
                else:
                    kinds["file"] += 1
    figures: dict[str, float] = {
        "rss_mib": int(status.get("VmRSS", "0 kB").split()[0]) / 1024,
        "uss_mib": (rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)) / 1024,
        "threads": int(status.get("Threads", "0").strip() or 0),
        "fds": sum(kinds.values()),
    }
    for kind in ("socket", "pipe", "file", "dev", "eventpoll", "inotify", "eventfd", "pidfd"):
        figures[f"fd_{kind}"] = kinds.get(kind, 0)
    return figures


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, state, comm) for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat:
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                table[int(entry)] = (int(fields[1]), fields[0], comm)
    return table


def descendants(table: dict[int, tuple[int, str, str]], root: int) -> list[int]:
    children = collections.defaultdict(list)
    for pid, (ppid, _, _) in table.items():
        children[ppid].append(pid)
    found, todo = [], [root]
    while todo:
        for child in children[todo.pop()]:
            found.append(child)
            todo.append(child)
    return found


def tmux_figures(home: Path) -> dict[str, float]:
    sock = str(home / "tmux.sock")

    def count(*args: str) -> int:
        done = subprocess.run(["tmux", "-S", sock, *args], capture_output=True, text=True, check=False)
        return len(done.stdout.splitlines()) if done.returncode == 0 else 0

    servers = 0
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and sock in _read(f"/proc/{entry}/cmdline").replace("\0", " ")
            and _read(f"/proc/{entry}/comm").strip() == "tmux: server"
        ):
            servers += 1
    return {
        "tmux_servers": servers,
        "tmux_sessions": count("list-sessions"),
        "tmux_panes": count("list-panes", "-a"),
    }


def disk_figures(home: Path) -> dict[str, float]:
    def usage(path: Path) -> tuple[int, int]:
        files = size = 0
        if path.is_file():
            return 1, path.stat().st_blocks * 512
        for root, _, names in os.walk(path):
            for name in names:
                with contextlib.suppress(OSError):
                    size += os.lstat(os.path.join(root, name)).st_blocks * 512
                    files += 1
        return files, size

    figures: dict[str, float] = {}
    for name in ("tether.db", "tether.db-wal"):
        figures[f"{name}_kib"] = (home / name).stat().st_size / 1024 if (home / name).exists() else 0
    for sub in ("audit", "logs", "logs/times", "spill", "snapshots", "locks"):
        files, size = usage(home / sub)
        figures[f"{sub}_files"] = files
        figures[f"{sub}_kib"] = size / 1024
    files, size = usage(home)
    figures["home_files"], figures["home_kib"] = files, size / 1024
    return figures


def slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2 or len(set(xs)) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


# ---------------------------------------------------------------- the servers mode


def http_client(url: str, token: str) -> Any:
    import httpx2 as httpx
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @contextlib.asynccontextmanager
    async def opened() -> Any:
        async with (
            create_mcp_http_client(
                headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(120.0)
            ) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            yield client

    return opened()


def caller(client: Any, counts: Counts) -> Call:
    async def call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str, bool]:
        counts.calls[name] += 1
        result = await client.call_tool(name, arguments)
        text = "".join(getattr(part, "text", "") for part in result.content)
        return dict(result.structured_content or {}), text, bool(result.is_error)

    return call


async def panel_visit(port: int, token: str, shell: str | None, n: int, counts: Counts) -> None:
    import websockets

    from tether.panel.auth import COOKIE_NAME, session_cookie_value

    base, origin = f"ws://127.0.0.1:{port}/panel/ws", f"http://127.0.0.1:{port}"
    headers = {"Cookie": f"{COOKIE_NAME}={session_cookie_value(token)}"}
    try:
        async with websockets.connect(f"{base}/events", origin=origin, additional_headers=headers) as ws:  # type: ignore[arg-type]
            await asyncio.wait_for(ws.recv(), 30)
        counts.calls["panel events"] += 1
        if shell is None:
            return
        term = f"{base}/term/{shell}?cols=100&rows=30"
        ws = await websockets.connect(term, origin=origin, additional_headers=headers)  # type: ignore[arg-type]
        await ws.send(json.dumps({"type": "input", "data": f"echo panel-{n}\r", "typed": True}))
        seen = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                while f"panel-{n}".encode() not in seen:
                    frame = await ws.recv()
                    seen += frame if isinstance(frame, bytes) else frame.encode()
        if n % 2:
            await ws.close()
        else:  # a browser tab that vanished: the TCP connection dropped, no close frame
            ws.transport.abort()
        counts.calls["panel terminal"] += 1
    except Exception as exc:
        counts.note(f"panel: {type(exc).__name__} {exc}")


async def disconnect_mid_call(url: str, token: str, counts: Counts) -> None:
    async def doomed() -> None:
        async with http_client(url, token) as client:
            await client.call_tool("bash", {"command": "sleep 30", "description": "soak: abandoned"})

    task = asyncio.ensure_future(doomed())
    await asyncio.sleep(0.5)
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    counts.calls["abandoned call"] += 1


async def http_loop(url: str, port: int, token: str, until: float, counts: Counts, keep_open: int) -> None:
    n = 0
    async with http_client(url, token) as client:
        call = caller(client, counts)
        while time.monotonic() < until:
            try:
                await oneshot_cycle(call, n, counts)
                if n % 3 == 0:
                    await disconnect_mid_call(url, token, counts)
                await panel_visit(port, token, counts.left_open[-1] if counts.left_open else None, n, counts)
                await shell_cycle(call, n, counts, keep_open, "h")
            except Exception as exc:
                counts.note(f"http: {type(exc).__name__} {exc}")
            n += 1
            counts.cycles += 1


async def stdio_loop(
    env: dict[str, str], until: float, counts: Counts, keep_open: int, pids: list[int]
) -> None:
    from mcp import Client, StdioServerParameters

    before = {pid for pid, (ppid, _, _) in process_table().items() if ppid == os.getpid()}
    async with Client(StdioServerParameters(command=TETHER, args=["mcp"], env=env)) as client:
        mine = {pid for pid, (ppid, _, _) in process_table().items() if ppid == os.getpid()} - before
        pids.extend(sorted(mine)[:1])
        call = caller(client, counts)
        n = 0
        while time.monotonic() < until:
            try:
                await shell_cycle(call, n, counts, keep_open, "s")
            except Exception as exc:
                counts.note(f"stdio: {type(exc).__name__} {exc}")
            n += 1
            counts.cycles += 1


async def probe_p50(url: str, token: str) -> float:
    times = []
    async with http_client(url, token) as client:
        for _ in range(5):
            t0 = time.perf_counter()
            await client.call_tool("bash", {"command": "echo probe", "description": "soak probe"})
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def sample(home: Path, servers: dict[str, int]) -> dict[str, float]:
    table = process_table()
    row: dict[str, float] = {}
    for name, pid in servers.items():
        if pid not in table:
            continue
        for key, value in proc_figures(pid).items():
            row[f"{name}.{key}"] = value
        kids = descendants(table, pid)
        row[f"{name}.children"] = len(kids)
        row[f"{name}.zombies"] = sum(1 for k in kids if table[k][1] == "Z")
    row.update(tmux_figures(home))
    row.update(disk_figures(home))
    return row


async def sampler(
    url: str,
    token: str,
    home: Path,
    servers: dict[str, int],
    counts: Counts,
    until: float,
    interval: float,
    rows: list[dict[str, float]],
    t0: float,
) -> None:
    while True:
        row = await asyncio.to_thread(sample, home, servers)
        try:
            row["probe_p50_ms"] = await probe_p50(url, token)
        except Exception as exc:
            counts.note(f"probe: {type(exc).__name__}")
        row["minute"] = (time.monotonic() - t0) / 60
        row["cycles"] = counts.cycles
        row["stress"] = 1.0 if os.environ.get("SOAK_STRESSING") == "1" else 0.0
        rows.append(row)
        fds = f"{row.get('serve.fds', 0):.0f}/{row.get('mcp.fds', 0):.0f}"
        print(
            f"  {row['minute']:5.1f} min  cycles {counts.cycles:4d}"
            f"  serve RSS {row.get('serve.rss_mib', 0):6.1f}"
            f"  mcp RSS {row.get('mcp.rss_mib', 0):6.1f}  fds {fds}  sessions {row['tmux_sessions']:.0f}"
            f"  probe {row.get('probe_p50_ms', 0):.1f} ms",
            flush=True,
        )
        if time.monotonic() >= until:
            return
        await asyncio.sleep(max(0.0, min(interval, until - time.monotonic())))


async def stress_window(load: int, start: float, stop: float, counts: Counts) -> None:
    if not load or not shutil.which("stress-ng"):
        return
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    # A Popen returns at once: nothing here waits on the loop.
    proc = subprocess.Popen(["stress-ng", "--cpu", str(load), "--quiet"], start_new_session=True)  # noqa: ASYNC220
    os.environ["SOAK_STRESSING"] = "1"
    try:
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
    finally:
        os.environ["SOAK_STRESSING"] = "0"
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        counts.calls["stress-ng windows"] += 1


def wait_ready(port: int, home: Path, deadline: float) -> str:
    import httpx2 as httpx

    while time.monotonic() < deadline:
        token_file = home / "token"
        if token_file.exists():
            token = token_file.read_text().strip()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0).status_code < 500:
                    return token
        time.sleep(0.2)
    raise SystemExit("tether serve did not answer")


def report(rows: list[dict[str, float]], counts: Counts, warmup: float) -> None:
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in ("minute", "cycles", "stress")]
    shown = (
        "serve.rss_mib",
        "serve.uss_mib",
        "mcp.rss_mib",
        "mcp.uss_mib",
        "serve.fds",
        "mcp.fds",
        "tmux_sessions",
    )
    print(
        f"\n{'min':>5s} {'cycles':>6s} {'load':>4s} "
        + " ".join(f"{k:>13s}" for k in (*shown, "probe_p50_ms"))
    )
    for r in rows:
        cells = " ".join(f"{r.get(k, float('nan')):13.1f}" for k in (*shown, "probe_p50_ms"))
        print(f"{r['minute']:5.1f} {r['cycles']:6.0f} {'cpu' if r.get('stress') else '':>4s} {cells}")
    steady = [r for r in rows if r["minute"] >= warmup] or rows
    heads = ("first", "after warmup", "last", "max", "per 100 cycles")
    print(f"\n{'figure':28s} " + " ".join(f"{h:>14s}" for h in heads))
    for key in keys:
        values = [r[key] for r in rows if key in r]
        xs = [r["cycles"] for r in steady if key in r]
        ys = [r[key] for r in steady if key in r]
        if not ys:
            continue
        print(
            f"{key:28s} {values[0]:14.1f} {ys[0]:14.1f} {values[-1]:14.1f} {max(values):14.1f} "
            f"{slope(xs, ys) * 100:14.3f}"
        )
    print(
        f"\n{counts.cycles} cycles; calls: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.calls.items()))
    )
    for what, count in counts.odd.most_common():
        print(f"  odd × {count}: {what}")


def servers_mode(args: argparse.Namespace) -> None:
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    home.mkdir(mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    (home / "config.toml").write_text("[sessions]\nmax_sessions = 32\n[cli]\ndoor_idle_seconds = 5\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_CONVERSATION",)}
    env["TETHER_HOME"] = str(home)
    (home / "user").mkdir(exist_ok=True)
    env["HOME"] = str(home / "user")  # as bench/sessions.py: tether's figures, not a .bashrc's
    os.environ["TETHER_HOME"] = str(home)
    subprocess.run([TETHER, "vault", "set", "SOAK_SECRET"], input=SECRET, text=True, env=env, check=True)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    serve = subprocess.Popen([TETHER, "serve", "--port", str(args.port)], env=env, **quiet)  # type: ignore[call-overload]
    counts, rows = Counts(), list[dict[str, float]]()
    try:
        token = wait_ready(args.port, home, time.monotonic() + 60)
        url = f"http://127.0.0.1:{args.port}/mcp"

        async def run() -> None:
            t0 = time.monotonic()
            until = t0 + args.minutes * 60
            third = (until - t0) / 3
            mcp_pids: list[int] = []
            servers = {"serve": serve.pid}
            stdio = asyncio.ensure_future(stdio_loop(env, until, counts, args.keep_open, mcp_pids))
            while not mcp_pids and not stdio.done():
                await asyncio.sleep(0.1)
            if mcp_pids:
                servers["mcp"] = mcp_pids[0]
            await asyncio.gather(
                http_loop(url, args.port, token, until, counts, args.keep_open),
                stdio,
                sampler(url, token, home, servers, counts, until, args.interval, rows, t0),
                stress_window(args.stress, t0 + third, t0 + 2 * third, counts),
            )
            # The shells left open: what the home holds with them, then without them.
            rows.append(
                {
                    **await asyncio.to_thread(sample, home, servers),
                    "minute": args.minutes,
                    "cycles": counts.cycles,
                }
            )

        print(
            f"soak: {args.minutes} min on {home}, tether serve pid {serve.pid}, port {args.port}", flush=True
        )
        asyncio.run(run())
        report(rows, counts, args.warmup)
        print(
            f"\nshells left open at the end: {len(counts.left_open)}; home kept at {home}"
            if args.home
            else ""
        )
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            serve.wait(timeout=30)
        kill = ["tmux", "-S", str(home / "tmux.sock"), "kill-server"]
        subprocess.run(kill, capture_output=True, check=False)
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)


# ---------------------------------------------------------------- the library mode


def native_figures() -> str:
    """What SQLite holds (all connections: page caches, statements) and what glibc's heap holds in
    use and free (``mallinfo2``): the memory of the process that is not Python objects."""
    import ctypes
    import ctypes.util

    parts = []
    with contextlib.suppress(OSError, AttributeError):
        lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        parts.append(f"SQLite {lib.sqlite3_memory_used() / 2**20:5.2f}")

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        parts.append(
            f"malloc in use {(info.uordblks + info.hblkhd) / 2**20:5.1f}, free {info.fordblks / 2**20:5.1f}"
        )
    return ", ".join(parts) + " MiB"


def clear_bounded_caches() -> None:
    """Empty the caches tether bounds, so a snapshot shows only what a cycle keeps for good: the
    ``functools`` caches of its modules, the guard's parsed ``declare -p`` lines and dumps, its
    verdicts, and the finished jobs a conversation keeps for ``job_output``."""
    from tether.process import tree
    from tether.shells import accept
    from tether.shells.guard import shellstate

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("tether"):
            for value in list(vars(module).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear):
                    clear()
    shellstate._lines.clear()
    accept._parsed.clear()
    getattr(tree, "_exec_stuck", {}).clear()
    for obj in gc.get_objects():
        verdicts = getattr(obj, "_verdicts", None) if type(obj).__name__ == "Guard" else None
        if isinstance(verdicts, dict):
            verdicts.clear()
    gc.collect()


async def library_mode(args: argparse.Namespace) -> None:
    import tether

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="soak-lib-", dir="/tmp"))
    home.mkdir(mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    (home / "config.toml").write_text("[sessions]\nmax_sessions = 32\n[cli]\ndoor_idle_seconds = 5\n")
    (home / "user").mkdir(exist_ok=True)
    os.environ["HOME"] = str(home / "user")
    os.environ["TETHER_HOME"] = str(home)
    # Before the first call: the loop has nothing else to run yet.
    subprocess.run([TETHER, "vault", "set", "SOAK_SECRET"], input=SECRET, text=True, check=True)  # noqa: ASYNC221
    counts = Counts()
    try:
        async with tether.Tether(home=home) as t:

            async def call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str, bool]:
                counts.calls[name] += 1
                result = await t.call(name, arguments)
                return dict(result.structured or {}), result.text, result.is_error

            async def cycles(first: int, last: int) -> None:
                for n in range(first, last):
                    if args.what in ("all", "oneshot"):
                        await oneshot_cycle(call, n, counts)
                    if args.what in ("all", "shells"):
                        await shell_cycle(call, n, counts, 0, "l")
                    counts.cycles += 1
                    if tracemalloc.is_tracing() and (n + 1) % args.every == 0:
                        traced = tracemalloc.get_traced_memory()[0] / 2**20
                        rss = proc_figures(os.getpid())["rss_mib"]
                        print(
                            f"  cycle {n + 1:5d}: RSS {rss:6.1f} MiB, traced Python {traced:6.2f} MiB,"
                            f" {native_figures()}",
                            flush=True,
                        )

            def snapshot() -> tuple[tracemalloc.Snapshot, collections.Counter[str], int]:
                if not args.keep_caches:
                    clear_bounded_caches()
                gc.collect()
                types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
                return tracemalloc.take_snapshot(), types, len(asyncio.all_tasks())

            rss0 = proc_figures(os.getpid())["rss_mib"]
            await cycles(0, args.warmup_cycles)
            tracemalloc.start(args.frames)
            before, types0, tasks0 = snapshot()
            rss1 = proc_figures(os.getpid())["rss_mib"]
            await cycles(args.warmup_cycles, args.cycles)
            after, types1, tasks1 = snapshot()
            rss2 = proc_figures(os.getpid())["rss_mib"]
            n = args.cycles - args.warmup_cycles
            stats = after.compare_to(before, "traceback" if args.frames > 1 else "lineno")
            grown = sum(s.size_diff for s in stats)
            print(f"library: {args.cycles} cycles ({args.what}), {args.warmup_cycles} of warm-up")
            print(f"RSS {rss0:.1f} → {rss1:.1f} (after warm-up) → {rss2:.1f} MiB")
            print(
                f"traced Python memory over {n} cycles: {grown / 1024:+.1f} KiB ({grown / n:+.0f} B a cycle)"
            )
            print(f"asyncio tasks: {tasks0} → {tasks1}")
            print("\nlines that grew most:")
            for stat in stats[: args.top]:
                if stat.size_diff <= 0:
                    break
                try:
                    frames = stat.traceback.format()
                except IndexError:  # a frame without a source line (a file since changed)
                    frames = [f"  {frame.filename}:{frame.lineno}" for frame in stat.traceback]
                where = frames[-2].strip() if len(frames) > 1 else (frames[0].strip() if frames else "")
                print(f"  {stat.size_diff / 1024:+8.1f} KiB {stat.count_diff:+6d} blocks  {where}")
                for line in frames[:-2][-2 * (args.frames - 1) :]:
                    print(f"  {'':28s}{line.strip()}")
            print("\nobject types that grew most:")
            for name, diff in (types1 - types0).most_common(15):
                print(f"  {diff:+7d} {name}")
            for what, count in counts.odd.most_common():
                print(f"  odd × {count}: {what}")
    finally:
        kill = ["tmux", "-S", str(home / "tmux.sock"), "kill-server"]
        subprocess.run(kill, capture_output=True, check=False)  # noqa: ASYNC221 (the run is over)
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    import logging

    # The SDK logs a traceback when a client's stream is cut under it: that is the workload's own
    # abandoned call, not a figure.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--port", type=int, default=9650)
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=2.0, help="minutes left out of the slopes")
    ap.add_argument("--stress", type=int, default=2, help="stress-ng --cpu N over the middle third (0: none)")
    ap.add_argument("--keep-open", type=int, default=6, help="shells the cycles leave open, at most")
    ap.add_argument("--home", help="use (and keep) this TETHER_HOME instead of a temporary one")
    ap.add_argument(
        "--library", action="store_true", help="in-process through tether.Tether, with tracemalloc"
    )
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--warmup-cycles", type=int, default=50)
    ap.add_argument("--what", choices=("all", "shells", "oneshot"), default="all")
    ap.add_argument("--frames", type=int, default=1, help="tracemalloc frames per allocation")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--every", type=int, default=25, help="library: print RSS and traced memory every N cycles"
    )
    ap.add_argument("--keep-caches", action="store_true", help="do not clear tether's bounded caches")
    args = ap.parse_args()
    if args.library:
        asyncio.run(library_mode(args))
    else:
        servers_mode(args)


if __name__ == "__main__":
    main()
