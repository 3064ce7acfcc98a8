"""Logging for the front doors.

Invariant: log records go to stderr and to ``$TETHER_HOME/logs/<name>.log`` — never to stdout,
which on ``tether mcp`` carries nothing but MCP messages. A log file that cannot be written (a
full disk) costs one line on stderr, where every record still goes, not a traceback per record.
``tether exec`` logs to its file only (``stderr=False``): its stderr is the command's, byte for
byte, and a warning of tether's own (no command container, as for every user but root) would
otherwise be printed into it by Python's last-resort handler at every run.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from tether.home import open_log

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(home: Path, name: str, *, level: int = logging.INFO, stderr: bool = True) -> Path:
    """Send the root logger to stderr (unless ``stderr`` is false) and to ``logs/<name>.log``;
    returns the log file path."""
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
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)] if stderr else []
    for handler in (*handlers, _LogFile(path, stderr=stderr)):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    # The SDK logs every request at INFO; keep our own log readable.
    for noisy in ("mcp", "httpx", "httpx2", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


class _LogFile(logging.FileHandler):
    """``logs/<name>.log``; a failed write says so once on stderr until a write succeeds again."""

    def __init__(self, path: Path, *, stderr: bool = True) -> None:
        super().__init__(path, encoding="utf-8")
        self._stderr = stderr  # records also go to stderr (else a failed write loses them)
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
        if not self._failing and self._stderr:
            # Without stderr (``tether exec``: stderr is the command's) the records are lost, unsaid.
            self._failing = True
            sys.stderr.write(
                f"tether: the log file {self.baseFilename} could not be written ({exc.strerror}); "
                "log records go to stderr only until it can be\n"
            )
