"""When each of tether's steps of a persistent-shell ``echo hi`` starts and ends, within the call.

No assertions (see DESIGN.md). Each call goes through ``build_catalog`` and ``ToolRegistry.call``
as a front door's does (``bench/phases.py`` gives the shell's own view of the same call). Here
tether's steps are wrapped, each start and end stamped with the clock from the call's start: the
targets' tmux listing (``live``), the guard's decision (``decided`` starts when it is made),
``ready``, ``plan_run``, the keys typed (``keys``), the wait, each inotify wake and each read of
the log (``_fed``, numbered when a call has several), the run's record (``_save``), its shaping
(``shape``) and the audit record (``audit``); bash's own ``C``, ``E`` and ``P`` stamps come from the
log. Printed: the median of each stamp over the calls that have it, and how many calls did (a
numbered step present in only some calls has its median over those: compare within a call with
care). The wrappers cost a few microseconds each.

The shells start with ``HOME`` set to an empty directory: a prompt hook of the user's (pyenv's
forks ``stat`` at every prompt) runs beside every answer and is the user's cost.

Run: .venv/bin/python bench/timeline.py [calls] [command]  (default 400 calls of ``echo hi``)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phases import scratch_home, stamps, warm_shell
from tether.shells import accept, domain, runs, waits, wakeups
from tether.shells import host as hosts

_MARKS: list[tuple[str, float]] = []
_START = [0.0]
_NUMBERED = {"inotify", "_fed"}


def _mark(name: str) -> None:
    _MARKS.append((name, time.perf_counter() - _START[0]))


def _timed(owner: Any, name: str, label: str) -> None:
    """Wrap ``owner.name`` (a coroutine function or a plain one) to stamp its start and end."""
    real: Callable[..., Any] = getattr(owner, name)

    if asyncio.iscoroutinefunction(real):

        async def stamped_async(*args: Any, **kwargs: Any) -> Any:
            _mark(f"{label}<")
            try:
                return await real(*args, **kwargs)
            finally:
                _mark(f"{label}>")

        setattr(owner, name, stamped_async)
    else:

        def stamped(*args: Any, **kwargs: Any) -> Any:
            _mark(f"{label}<")
            try:
                return real(*args, **kwargs)
            finally:
                _mark(f"{label}>")

        setattr(owner, name, stamped)


def _wrap_steps() -> None:
    from tether.audit.commit import GroupCommit

    _timed(domain.Shells, "live", "live")
    _timed(runs, "_run_decided", "decided")
    _timed(runs, "ready", "ready")
    _timed(accept, "plan_run", "plan_run")
    _timed(hosts.ShellHost, "type_keys_then_text", "keys")
    _timed(waits.WaitEngine, "wait", "wait")
    _timed(waits, "_fed", "_fed")
    _timed(wakeups.LogWatcher, "_on_readable", "inotify")
    _timed(runs, "_save", "_save")
    _timed(runs, "_shape_run", "shape")
    _timed(GroupCommit, "append", "audit")


def _firsts(marks: list[tuple[str, float]]) -> dict[str, float]:
    """Each step's first start and end in one call (ms), the repeated ones numbered."""
    counts: dict[str, int] = {}
    found: dict[str, float] = {}
    for name, at in marks:
        if name[:-1] in _NUMBERED:
            counts[name] = counts.get(name, 0) + 1
            name = f"{name[:-1]}#{counts[name]}{name[-1]}"
        found.setdefault(name, at * 1000)
    return found


async def measure(n: int, command: str, log_dir: Path) -> list[dict[str, float]]:
    async with warm_shell(command) as (run_once, shell):
        calls: list[dict[str, float]] = []
        begun: list[float] = []
        for _ in range(n):
            _MARKS.clear()
            begun.append(time.time())
            _START[0] = time.perf_counter()
            await run_once()
            _mark("end")
            calls.append(_firsts(_MARKS))
            await asyncio.sleep(0.002)  # the next call starts after the prompt, as an agent's does
        events = stamps(log_dir / f"{shell}.log")
        for call, start in zip(calls, begun, strict=True):
            until = start + call["end"] / 1000
            for at, kind in events:
                name = f"bash {kind.decode()}"
                if start <= at <= until and name not in call:
                    call[name] = (at - start) * 1000
        return calls


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    command = sys.argv[2] if len(sys.argv) > 2 else "echo hi"
    with scratch_home("thtl") as root:
        print(f"1-minute load average {os.getloadavg()[0]:.2f}; {n} calls of shell_run {command!r}")
        _wrap_steps()
        calls = asyncio.run(measure(n, command, root / "tether" / "logs"))
    found: dict[str, list[float]] = {}
    for call in calls:
        for name, at in call.items():
            found.setdefault(name, []).append(at)
    for name, values in sorted(found.items(), key=lambda item: statistics.median(item[1])):
        print(f"  {name:16} {statistics.median(values):7.3f} ms from the call's start  ({len(values)} calls)")


if __name__ == "__main__":
    main()
