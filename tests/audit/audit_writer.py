"""A separate writer process for the audit tests (run as a script, not collected by pytest).

usage: audit_writer.py HOME TAG COUNT MAX_PAD [TEAR_AFTER]

Appends COUNT records (forever when COUNT is 0) as actor TAG, each with ``extra.id = TAG-i`` and
a command padded with up to MAX_PAD random characters. With COUNT 0 it prints every id once
``append`` has returned — i.e. once the record is acknowledged — one flushed line per id.

With TEAR_AFTER, the record after that many writes is only half written: the writer prints
``TORN`` and blocks (still holding the log's lock, exactly like a process stopped inside
``write()``) until it is killed.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from tether.audit import AuditLog
from tether.audit import log as log_module


def _tear_after(writes: int) -> None:
    real_write_all = log_module._write_all
    done = 0

    def tearing(fd: int, data: bytes) -> None:
        nonlocal done
        if len(data) > 1:  # a record line, not the completion of a torn one
            done += 1
            if done > writes:
                os.write(fd, data[: len(data) // 2])
                sys.stdout.write("TORN\n")
                sys.stdout.flush()
                sys.stdin.read()  # blocks until the test kills this process
        real_write_all(fd, data)

    log_module._write_all = tearing


def main() -> int:
    home, tag, count, max_pad = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:
        _tear_after(int(sys.argv[5]))
    log = AuditLog(home)
    rng = random.Random()
    index = 0
    while count == 0 or index < count:
        record_id = f"{tag}-{index}"
        padding = "p" * rng.randrange(max_pad) if max_pad else ""
        log.append(
            actor=tag,
            source="tool",
            tool="writer",
            action="append",
            command=f"echo {record_id} {padding}",
            extra={"id": record_id},
        )
        if count == 0:
            sys.stdout.write(record_id + "\n")
            sys.stdout.flush()
        index += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
