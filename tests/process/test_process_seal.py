"""``seal_environment``: a real Python process seals itself, then its child reads its environ."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import os, subprocess
from tether.config import EnvSection
from tether.process.seal import seal_environment
report = seal_environment(EnvSection(keep=("KEPT_TOKEN",)))
print("removed", sorted(report.removed), "wiped", report.wiped)
print("environ", "GITHUB_TOKEN" in os.environ, os.environ.get("KEPT_TOKEN"), os.environ.get("PLAIN"))
child = "tr '\\\\0' '\\\\n' < /proc/$PPID/environ"
print(subprocess.run(["bash", "-c", child], capture_output=True, text=True).stdout)
"""


def test_a_sealed_process_shows_its_children_no_scrubbed_variable() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "GITHUB_TOKEN": "ghp_sealed1",
        "MYSQL_PWD": "sealed2",
        "DATABASE_URL": "postgres://u:sealed3@db/x",
        "KEPT_TOKEN": "kept-on-purpose",
        "PLAIN": "plain-value",
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    out = done.stdout
    assert "removed ['DATABASE_URL', 'GITHUB_TOKEN', 'MYSQL_PWD'] wiped True" in out, done.stderr
    assert "environ False kept-on-purpose plain-value" in out
    assert "sealed" not in out  # neither in os.environ nor in /proc/PID/environ
    assert "KEPT_TOKEN=kept-on-purpose" in out and "PLAIN=plain-value" in out


def test_the_process_is_no_longer_dumpable() -> None:
    script = (
        "from tether.config import EnvSection; from tether.process.seal import seal_environment; "
        "import ctypes; seal_environment(EnvSection()); print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0"  # PR_GET_DUMPABLE
