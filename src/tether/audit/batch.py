"""One lock hold's worth of audit appends: records chained in order and synced together.

Invariant: what ``Batch`` wrote since its last ``sync`` is not durable and, on any failure, is
truncated away before the error is raised (``PartialAppend`` names the records that were durable
by then), so nothing unacknowledged stays in the file. A seal position first makes the records
before it durable, then the seal, and only then moves the sealing key forward on disk.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tether.audit.record import AuditRecord
from tether.audit.seal import SealKey, seal_extra, write_writer_key


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """The chain's newest record: the next one gets ``seq + 1`` and ``prev = hash``."""

    seq: int
    hash: str


@dataclass(slots=True, kw_only=True)
class DayFile:
    """One opened day file as found under the lock: where its complete lines end, what follows."""

    path: Path
    fd: int
    end: int  # just past the last newline
    torn: bytes  # bytes after ``end`` (a record whose writer has not finished)
    head: Head | None  # newest parseable record among the complete lines


WriteRecord = Callable[["DayFile", dict[str, Any], Head, int], AuditRecord]
SealBody = Callable[[dict[str, Any]], dict[str, Any]]


class Batch:
    """Records being appended under one lock hold: chained in order, synced together.

    What was written since the last ``sync`` is not yet durable; a failure truncates it away, so
    nothing unacknowledged stays behind. A seal position makes the records before it
    durable first, then the seal itself, and only then moves the key on disk forward: a crash
    before that leaves a key for an index already sealed, which the next seal steps past.
    """

    def __init__(
        self,
        *,
        directory: Path,
        write: WriteRecord,
        seal_body: SealBody,
        day: DayFile,
        head: Head,
        ts: int,
        sealer: SealKey | None,
    ) -> None:
        self.directory = directory
        self._write_record = write
        self._seal_body = seal_body
        self.day = day
        self.head = head
        self.ts = ts
        self.sealer = sealer
        self.new_file = os.fstat(day.fd).st_size == 0
        self.start = os.fstat(day.fd).st_size  # where the part not yet durable begins
        self.durable: list[AuditRecord] = []
        self.pending: list[AuditRecord] = []

    def write(self, body: dict[str, Any]) -> AuditRecord:
        try:
            sealer = self.sealer
            if sealer is not None and (self.head.seq + 1) % sealer.every == 0:
                extra, following = seal_extra(sealer, prev=self.head.hash, seq=self.head.seq + 1)
                self._write(self._seal_body(extra))
                self.sync()
                write_writer_key(self.directory, following)
                self.sealer = following
            record = self._write(body)
            self.pending.append(record)
            return record
        except PartialAppend:
            raise  # the sync before the seal failed and has already cleaned up
        except OSError as exc:
            self._fail(exc)

    def sync(self) -> None:
        try:
            os.fsync(self.day.fd)
            if self.new_file:
                fsync_dir(self.directory)  # the file's directory entry must be as durable as its data
                self.new_file = False
        except OSError as exc:
            self._fail(exc)
        self.start = os.fstat(self.day.fd).st_size
        self.durable.extend(self.pending)
        self.pending.clear()

    def _write(self, body: dict[str, Any]) -> AuditRecord:
        record = self._write_record(self.day, body, self.head, self.ts)
        self.head = Head(seq=record.seq, hash=record.hash)
        return record

    def _fail(self, exc: OSError) -> NoReturn:
        # Never leave part of a batch behind a failure we report: the records not yet synced go.
        truncate_quietly(self.day.fd, self.start)
        raise PartialAppend(exc, self.durable) from exc


class PartialAppend(OSError):
    """An append failed after ``durable`` (possibly none) of its records were made durable."""

    def __init__(self, cause: OSError, durable: list[AuditRecord]) -> None:
        super().__init__(*cause.args)  # an errno and its text, or tether's own words alone
        self.durable = list(durable)


def write_all(fd: int, data: bytes) -> None:
    """One ``write()``; a short write (disk full, signal) is reported, never continued piecemeal."""
    written = os.write(fd, data)
    if written != len(data):
        raise OSError(errno.ENOSPC, f"short write to the audit log ({written} of {len(data)} bytes)")


def truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError:
        pass  # the next appender's tail settling discards the partial line instead


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
