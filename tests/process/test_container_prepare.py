"""A server starts its command container while it waits for its first call, not in that call.

``prepare()`` begins PID 1's start in the background; ``container()`` then takes that one (no
second PID 1). ``tether mcp`` calls it once it serves: its ``tether-init`` child exists before
any tool was called.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from hang import HANG_S
from proc_probe import mcp_children
from tether.process.container import _INIT_SCRIPT, container

TETHER = str(Path(sys.executable).parent / "tether")

_PREPARED = textwrap.dedent(
    """
    import os, time, psutil
    from tether.process import container as box

    def inits():
        return [p for p in psutil.Process().children() if p.name() == "tether-init"]

    box.prepare()
    deadline = time.monotonic() + float(os.environ["HANG_S"])
    while not inits():  # started without a command asking for it
        assert time.monotonic() < deadline, "prepare() started no PID 1"
        time.sleep(0.01)
    (started,) = inits()
    taken = box.container()
    assert taken is not None and taken.init_pid == started.pid, (taken, started)
    box.prepare()  # already there: nothing more starts
    assert [p.pid for p in inits()] == [started.pid]
    print("ok")
    """
)


def _needs_namespaces() -> None:
    if container() is None:
        pytest.skip("this machine cannot create PID namespaces (the README states the limit)")


def test_prepare_starts_pid_1_in_the_background_and_container_takes_it() -> None:
    _needs_namespaces()
    done = subprocess.run(
        [sys.executable, "-c", _PREPARED],
        env={**os.environ, "HANG_S": str(HANG_S)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


async def test_tether_mcp_has_its_container_before_the_first_call(tether_home: Path) -> None:
    _needs_namespaces()
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    before = {p.pid for p in psutil.Process().children()}
    async with Client(StdioServerParameters(command=TETHER, args=["mcp"], env=env)):
        (server,) = mcp_children(besides=before)
        with anyio.fail_after(HANG_S):
            while not [p for p in server.children() if p.name() == "tether-init"]:
                await anyio.sleep(0.01)


def test_pid_1_loads_only_the_built_in_signal_module() -> None:
    """PID 1 is a fresh ``python -I -S``: ``signal``'s enums, with ``enum``, ``functools`` and
    ``collections`` that ``-S`` has not loaded, were about a third of its start — a start that
    ``tether exec`` may wait for before it spawns the command. Its module is run here as PID 1 runs
    it, up to ``main``."""
    probe = (
        "import sys; path = sys.argv[1]\n"
        "exec(compile(open(path).read(), path, 'exec'), {'__name__': 'tether_init'})\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(_INIT_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=True,
    )
    loaded = set(done.stdout.split())
    assert {"_signal", "ctypes", "select"} <= loaded, sorted(loaded)
    assert not loaded & {"signal", "enum", "functools", "collections"}, sorted(loaded)
