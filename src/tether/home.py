"""Where a tether process keeps its state: ``$TETHER_HOME``, else ``~/.tether``.

Invariant: one rule for every process and door (``tether.config`` re-exports these). Standard
library only and no dataclasses, so ``tether mcp`` can find its handshake cache before anything
heavier is imported.
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_home(environ: dict[str, str] | None = None) -> Path:
    """``$TETHER_HOME`` if set and non-empty, else ``~/.tether`` (same rule everywhere)."""
    env = os.environ if environ is None else environ
    value = env.get("TETHER_HOME", "").strip()
    return Path(value).expanduser() if value else Path.home() / ".tether"


def ensure_home(home: Path) -> Path:
    """Create the state directory (mode 0700) and its fixed subdirectories."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for sub in ("audit", "spill", "logs"):
        (home / sub).mkdir(mode=0o700, exist_ok=True)
    return home
