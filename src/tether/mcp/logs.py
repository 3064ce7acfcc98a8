"""Logging for the long-running front doors.

Invariant: log records go to stderr and to ``$TETHER_HOME/logs/<name>.log`` — never to stdout,
which on ``tether mcp`` carries nothing but MCP messages. A log file that cannot be written (a
full disk) costs one line on stderr, where every record still goes, not a traceback per record.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from tether.home import open_log

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(home: Path, name: str, *, level: int = logging.INFO) -> Path:
    """Send the root logger to stderr and to ``logs/<name>.log``; returns the log file path."""
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = logs / f"{name}.log"
    # Logs name commands and conversations: private to the user, like the rest of TETHER_HOME.
    # A FIFO in its place is refused, not waited on (``open_log``).
    os.close(open_log(path))
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(_FORMAT)
    for handler in (logging.StreamHandler(sys.stderr), _LogFile(path)):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    # The SDK logs every request at INFO; keep our own log readable.
    for noisy in ("mcp", "httpx", "httpx2", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


class _LogFile(logging.FileHandler):
    """``logs/<name>.log``; a failed write says so once on stderr until a write succeeds again."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self._failing = False  # said so on stderr, and no write has succeeded since
        self._failed = False  # this record's write failed (``emit`` calls ``handleError``)

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        super().emit(record)
        if not self._failed:
            self._failing = False

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        self._failed = True
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        if not self._failing:
            self._failing = True
            sys.stderr.write(
                f"tether: the log file {self.baseFilename} could not be written ({exc.strerror}); "
                "log records go to stderr only until it can be\n"
            )
