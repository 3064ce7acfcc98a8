"""Where a persistent-shell ``echo hi`` spends its time, and what makes its slowest calls slow.

No assertions (see DESIGN.md): it prints figures and shares of the round trip measured in the same
run. Each call goes through ``build_catalog`` and ``ToolRegistry.call`` exactly like a front door
(safety hooks, guard, audit record and its ``fsync``), without MCP. Nothing inside tether is
patched: the phases come from the clock around the call and from the times bash itself stamps on
its events in the shell's log (``$EPOCHREALTIME`` on ``C``, the command line starts, and ``P``, its
next prompt), so they are the shell's own view:

- *before the command runs*: arguments, targets and the person-typing check (one tmux round trip),
  the guard, typing through tmux, bash's loader taking the line (to ``C``);
- *the command*: ``echo hi`` until its line ends (``C`` to ``E``, which tether's first prompt hook
  prints with ``$?``; a wait for ``exit`` ends there);
- *after the command's end*: the log reaching tether, the run's record, the result, the audit
  record (``E`` to the answer).

Apart from these, the prompt hooks (tether's state dump the guard reads) and the prompt (``E`` to
``P``) run while tether answers; the next call waits for the prompt only if it has not come yet.

``os.fsync`` of this process is timed (not changed), so the audit log's syncs during the calls are
counted; a plain append-and-``fsync`` loop in the same directory, before and after, is the
baseline. The slowest 1 % of calls are broken down by phase, with the audit ``fsync``'s share:
on this machine's disk a sync that meets the kernel's writeback of the shells' logs and the
store takes tens of milliseconds now and then, and SQLite's checkpoint (every ~200 calls, inside
the commit of the run's record) adds ~5 ms to the call it falls in ("after the prompt").

Run: .venv/bin/python bench/phases.py [calls] [command]  (default 1000 calls of ``echo hi``; a
command such as ``'sleep 0.05'`` shows what a call adds after a longer command)
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from disk import fsync_times
from tether.config import load_config
from tether.shells.integration.events import EventScanner
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext, ToolResult

_NONCE = re.compile(rb"\x1b\]6973;([0-9A-Za-z]+);")  # every event of the log carries it


@dataclass(slots=True)
class Call:
    start: float  # epoch seconds
    end: float
    ran: float | None = None  # bash's C stamp
    ended: float | None = None  # its E stamp (the line ended)
    prompt: float | None = None  # the next P stamp (the prompt, maybe after the answer)
    audit_sync_ms: float = 0.0


class SyncClock:
    """Times every ``os.fsync`` of this process, with the file it synced (the audit record's is
    its day file, synced on the loop's thread or the commit thread)."""

    def __init__(self) -> None:
        self.syncs: list[tuple[float, float, str]] = []  # (end epoch, ms, path)
        self._real = os.fsync

    def __enter__(self) -> SyncClock:
        real = self._real

        def timed(fd: int) -> None:
            start = time.perf_counter()
            real(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.syncs.append((time.time(), (time.perf_counter() - start) * 1000, path))

        os.fsync = timed  # type: ignore[assignment]
        return self

    def __exit__(self, *_exc: object) -> None:
        os.fsync = self._real


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def stamps(log: Path) -> list[tuple[float, bytes]]:
    """When bash printed each C, E and P of the log: read by tether's own scanner, so the figures
    follow the integration's format wherever it goes."""
    data = log.read_bytes()
    found = _NONCE.search(data)
    assert found is not None, f"no shell event in {log}"
    events = EventScanner(found.group(1).decode(), 0).feed(data)
    return sorted((ev.at, ev.kind.encode()) for ev in events if ev.kind in "CEP" and ev.at is not None)


def attach(
    calls: list[Call], events: list[tuple[float, bytes]], syncs: list[tuple[float, float, str]]
) -> None:
    """Give each call the first ``C`` bash stamped within it, the first ``E`` after that within it,
    the first ``P`` after its ``C`` before the next call began, and its audit sync."""
    i = 0
    for n, call in enumerate(calls):
        until = calls[n + 1].start if n + 1 < len(calls) else float("inf")
        while i < len(events) and events[i][0] < call.start:
            i += 1
        j = i
        while j < len(events) and events[j][0] < until:
            at, kind = events[j]
            if kind == b"C" and call.ran is None and at <= call.end:
                call.ran = at
            elif kind == b"E" and call.ran is not None and call.ended is None and at <= call.end:
                call.ended = at
            elif kind == b"P" and call.ran is not None and call.prompt is None:
                call.prompt = at
            j += 1
        i = j
    audit = [(at, ms) for at, ms, path in syncs if "/audit/" in path and path.endswith(".jsonl")]
    k = 0
    for call in calls:
        while k < len(audit) and audit[k][0] < call.start:
            k += 1
        while k < len(audit) and audit[k][0] <= call.end:
            call.audit_sync_ms += audit[k][1]
            k += 1


def report(calls: list[Call], before: list[float], after: list[float], command: str) -> None:
    whole = [(c.end - c.start) * 1000 for c in calls]
    full = [c for c in calls if c.ran is not None and c.ended is not None]
    p50 = statistics.median(whole)
    print(
        f"{len(calls)} calls of shell_run {command!r} (wait exit): "
        f"p50 {p50:.2f} ms, p99 {pct(whole, 0.99):.2f} ms"
    )
    phases = {
        "before the command runs (tether, tmux, bash's loader)": [
            (c.ran - c.start) * 1000 for c in full if c.ran is not None
        ],
        "the command (bash, to the end of its line)": [
            (c.ended - c.ran) * 1000 for c in full if c.ended is not None and c.ran is not None
        ],
        "after the command's end (log, record, result, audit)": [
            (c.end - c.ended) * 1000 for c in full if c.ended is not None
        ],
        "  of which the audit record's fsync": [c.audit_sync_ms for c in full],
    }
    for name, values in phases.items():
        mid = statistics.median(values)
        print(f"  {name:56} p50 {mid:6.2f} ms ({100 * mid / p50:4.1f} %)  p99 {pct(values, 0.99):7.2f} ms")
    hooks = [(c.prompt - c.ended) * 1000 for c in full if c.prompt is not None and c.ended is not None]
    if hooks:
        late = sum(1 for c in full if c.prompt is not None and c.prompt > c.end)
        print(
            f"  beside the answer: the prompt hooks and the prompt (E to P) p50 "
            f"{statistics.median(hooks):.2f} ms; the prompt came after the answer in "
            f"{100 * late / len(full):.0f} % of the calls"
        )
    disk = before + after
    print(
        "baseline, the same append + fsync alone in the same directory: "
        f"p50 {statistics.median(disk):.2f} ms, "
        f"p99 {pct(disk, 0.99):.2f} ms, max {max(disk):.2f} ms"
    )
    slow = sorted(calls, key=lambda c: c.end - c.start)[-max(1, len(calls) // 100) :]
    print(f"the slowest {len(slow)} calls (1 %):")
    for c in reversed(slow):
        total = (c.end - c.start) * 1000
        parts = [f"audit fsync {c.audit_sync_ms:.1f} ms"]
        if c.ran is not None and c.ended is not None:
            parts += [
                f"before {(c.ran - c.start) * 1000:.1f}",
                f"bash {(c.ended - c.ran) * 1000:.1f}",
                f"after {(c.end - c.ended) * 1000:.1f}",
            ]
        print(f"  {total:7.2f} ms: " + ", ".join(parts))
    share = sum(c.audit_sync_ms for c in slow) / sum((c.end - c.start) * 1000 for c in slow)
    print(f"  the audit fsync is {100 * share:.0f} % of their time")


@asynccontextmanager
async def warm_shell(command: str) -> AsyncIterator[tuple[Callable[[], Awaitable[ToolResult]], str]]:
    """A shell opened through ``build_catalog`` and ``ToolRegistry.call`` as a front door's call
    opens it, warmed up on ``command``: a call of ``shell_run`` running it (wait for exit), and
    the shell's id."""
    catalog = build_catalog(load_config())
    ctx = CallContext(actor="conv-bench")
    registry = catalog.registry
    try:
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        task = {
            "target": {"sessions": shell},
            "action": {"kind": "run", "command": command},
            "wait": {"kind": "exit"},
        }

        async def run_once() -> ToolResult:
            return await registry.call("shell_run", {"tasks": [task]}, ctx)

        for _ in range(30):  # warm: the first runs of a shell wait for its prompt, caches fill
            await run_once()
        yield run_once, shell
    finally:
        await catalog.aclose()


@contextmanager
def scratch_home(prefix: str) -> Iterator[Path]:
    """A ``TETHER_HOME`` (``<root>/tether``) and tmux of their own, and an empty ``HOME`` (no
    ``~/.bashrc`` prompt hooks in the shell); its tmux server ended and all of it removed after."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    (root / "home").mkdir()
    os.environ["HOME"] = str(root / "home")
    os.environ["TMUX_TMPDIR"] = str(root)
    os.environ["TETHER_HOME"] = str(root / "tether")
    try:
        yield root
    finally:
        sock = root / "tether" / "tmux.sock"
        if sock.exists():
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


async def measure(home: Path, n: int, command: str) -> tuple[list[Call], Path, SyncClock]:
    async with warm_shell(command) as (run_once, shell):
        calls = []
        with SyncClock() as clock:
            for _ in range(n):
                start = time.time()
                result = await run_once()
                calls.append(Call(start=start, end=time.time()))
                assert result.structured["tasks"][0]["exitCode"] == 0, result.text
        return calls, home / "tether" / "logs" / f"{shell}.log", clock


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    command = sys.argv[2] if len(sys.argv) > 2 else "echo hi"
    with scratch_home("thph") as root:
        print(f"1-minute load average {os.getloadavg()[0]:.2f}")
        before = fsync_times(root, 400, pause_s=0.004)
        calls, log, clock = asyncio.run(measure(root, n, command))
        after = fsync_times(root, 400, pause_s=0.004)
        attach(calls, stamps(log), clock.syncs)
        report(calls, before, after, command)


if __name__ == "__main__":
    main()
