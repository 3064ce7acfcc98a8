"""docs/library.md and the README stay true: every Python example on them runs as written, each as
its own program in a fresh ``TETHER_HOME``, and passes ``mypy --strict`` as a user's own code would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mypy import api as mypy_api

from hang import HANG_S

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "README.md", REPO / "docs" / "library.md")
_FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
EXAMPLES = [text for page in PAGES for text in _FENCE.findall(page.read_text(encoding="utf-8"))]


def test_the_pages_have_examples() -> None:
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("example", range(len(EXAMPLES)))
def test_every_python_example_runs_as_written(
    example: int, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    home = tmp_path_factory.mktemp("th", numbered=True)  # short: the tmux socket lives in it
    script = tmp_path / "example.py"
    script.write_text(EXAMPLES[example], encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TETHER_HOME": str(home)}
    try:
        done = subprocess.run(
            [sys.executable, "-W", "error::ResourceWarning", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_S,
            cwd=tmp_path,
        )
    finally:
        subprocess.run(
            ["tmux", "-S", str(home / "tmux.sock"), "kill-server"], capture_output=True, check=False
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip()


def test_the_python_examples_pass_mypy_strict(tmp_path: Path) -> None:
    files = []
    for number, text in enumerate(EXAMPLES):
        path = tmp_path / f"example_{number}.py"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    old = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(REPO / "src")
    try:
        out, err, status = mypy_api.run(
            ["--strict", "--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent", *files]
        )
    finally:
        if old is None:
            del os.environ["MYPYPATH"]
        else:
            os.environ["MYPYPATH"] = old
    assert status == 0, out + err
