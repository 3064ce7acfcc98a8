"""The server's own log file on a full disk: the records still reach stderr, and one line says the
file is not being written, instead of a traceback for every record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hang import HANG_S

_LOGGING = """
import logging, sys
from pathlib import Path
from tether.mcp.logs import configure_logging

configure_logging(Path(sys.argv[1]), "mcp")
log = logging.getLogger("tether.probe")
for n in range(3):
    log.warning("record %d %s", n, "x" * 8192)  # more than the file's buffer: each one is written
Path(sys.argv[2]).unlink()  # room again
log.warning("record after")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (needs root)")
def test_a_full_log_file_is_one_line_on_stderr_not_a_traceback_per_record(tmp_path: Path) -> None:
    home = tmp_path / "home"
    logs = home / "logs"
    logs.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(logs)], check=True)
    try:
        filler = logs / "filler"
        (logs / "mcp.log").touch()
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        done = subprocess.run(
            [sys.executable, "-c", _LOGGING, str(home), str(filler)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        err = done.stderr
        assert "Traceback" not in err and "Logging error" not in err, err[-3000:]
        assert err.count("record ") == 4  # every record still reached stderr
        notes = [line for line in err.splitlines() if line.startswith("tether: ")]
        assert notes == [
            f"tether: the log file {logs}/mcp.log could not be written (No space left on device); "
            "log records go to stderr only until it can be"
        ], err[-3000:]
        assert "record after" in (logs / "mcp.log").read_text()  # written again once there is room
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)
