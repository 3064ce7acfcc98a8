"""The Makefile's `make run` / `make test` on a fresh Debian machine: what `make system` installs.

The recipe is run for real, with ``dpkg`` answering that nothing is installed and ``apt-get``
recording what it was asked for instead of installing it (both stand-ins first on ``PATH``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hang import HANG_S

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_system_installs_what_the_venv_step_needs(tmp_path: Path) -> None:
    # `python3 -m venv .venv`, the next step, needs Debian's python3 and python3-venv (ensurepip is
    # split out of python3 there): a fresh machine without them stopped at "ensurepip is not
    # available" after installing everything else.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "apt-get.args"
    (bin_dir / "dpkg").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
    for tool in ("dpkg", "apt-get"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "system"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    install = next(line.split() for line in asked.read_text().splitlines() if line.startswith("install"))
    assert {"python3", "python3-venv", "tmux", "bubblewrap", "chromium", "git"} <= set(install), install
