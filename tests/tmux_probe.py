"""An independent observer of a home's tmux server for tests: which shell sessions it holds.

It asks tmux directly (not through tether), so a test that uses it checks tether's records
instead of trusting them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def shell_sessions(home: Path) -> set[str]:
    """The shell sessions (``dsh-…``) the tmux server of ``home`` holds now (none: no server)."""
    out = subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {name for name in out.split() if name.startswith("dsh-")}
