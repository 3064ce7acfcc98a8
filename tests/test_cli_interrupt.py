"""A Ctrl-C ends any ``tether`` command without a traceback from tether's code, whenever it comes.

SIGINT is sent at several moments right after the command is spawned — while Python starts, while
tether imports, while the command runs and while the process exits — and each run is judged by
what it left on stderr and its status, never by how long anything took. Before tether's first line
runs, the interpreter is still starting (``site``, then finding the package): a SIGINT there is
CPython's to report (``Fatal Python error: init_…``, or a traceback holding only the launcher's
line and frozen import frames), which no program can change; those runs are counted apart.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TETHER = str(Path(sys.executable).parent / "tether")
MOMENTS_S = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.4, 0.8)
REPEATS = 4
# A frame of tether's own source (``…/tether/….py``), in a traceback or an "Exception ignored".
TETHER_FRAME = re.compile(r'File "[^"]*/tether/[^"]*\.py"')

pytestmark = pytest.mark.timeout(300)


def _interrupted(argv: list[str], home: Path, delay_s: float) -> tuple[int, str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    proc = subprocess.Popen(
        [TETHER, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    if delay_s:
        time.sleep(delay_s)  # a moment to interrupt at, not a synchronisation
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode("utf-8", "replace")


def _interpreter_starting(err: str) -> bool:
    """CPython's own start-up was interrupted, before any line of tether ran: ``site`` (a fatal
    error), finding the package (a traceback without a frame of tether's), or opening the launcher
    (a bare ``KeyboardInterrupt``: raised where no Python frame ran yet)."""
    return (
        err.startswith("Fatal Python error: init_")
        or err.strip() == "KeyboardInterrupt"
        or ("Traceback" in err and not TETHER_FRAME.search(err) and "KeyboardInterrupt" in err)
    )


@pytest.mark.parametrize("argv", [["--version"], ["exec", "--", "true"], ["mcp"]], ids=" ".join)
def test_a_ctrl_c_at_any_moment_ends_the_command_without_a_traceback(argv: list[str], tmp_path: Path) -> None:
    seen: list[tuple[float, int, str]] = []
    for delay in MOMENTS_S:
        for _ in range(REPEATS):
            status, err = _interrupted(argv, tmp_path, delay)
            seen.append((delay, status, err))
    for delay, status, err in seen:
        if _interpreter_starting(err):
            continue
        moment = f"after {delay * 1000:.0f} ms"
        assert not TETHER_FRAME.search(err), f"{moment}: {err}"
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, f"{moment}: {err}"
        # Interrupted: 130 as the command reports it, or death by SIGINT before Python handles it
        # (or after it stopped handling it, at its very end); 0: it was done first.
        assert status in (0, 130, -signal.SIGINT), (delay, status, err)
