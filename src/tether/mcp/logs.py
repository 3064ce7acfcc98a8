"""Logging for the long-running front doors.

Invariant: log records go to stderr and to ``$TETHER_HOME/logs/<name>.log`` — never to stdout,
which on ``tether mcp`` carries nothing but MCP messages.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(home: Path, name: str, *, level: int = logging.INFO) -> Path:
    """Send the root logger to stderr and to ``logs/<name>.log``; returns the log file path."""
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = logs / f"{name}.log"
    # Logs name commands and conversations: private to the user, like the rest of TETHER_HOME.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(_FORMAT)
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(path, encoding="utf-8")):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    # The SDK logs every request at INFO; keep our own log readable.
    for noisy in ("mcp", "httpx", "httpx2", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path
