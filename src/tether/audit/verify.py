"""Proving the audit log intact: every line a valid record, every record chained to the one before.

Invariant: ``verify`` reports the *first* broken record in chain order (day files by name, lines
in file order) or, when there is none, that the whole chain holds with its record count. It never
writes: a torn tail is reported, not repaired (the next append settles it).

Checks per line: it ends with a newline; it is a JSON object in canonical form (so a changed
byte anywhere is caught even where JSON would parse it back to the same value); its fields have
the record types; ``hash`` is the SHA-256 of the rest; ``prev`` is the previous record's ``hash``
(``GENESIS_HASH`` first, across day files); ``seq`` is one more than the previous record's.

Reading races with live writers: a line being written may be seen half done at the end of the
newest file. Only in that case ``verify`` takes the writers' lock (shared, waiting at most
``LOCK_WAIT_SECONDS``) and re-reads from that line on, so a busy log is never reported broken and
verification never stalls writers otherwise.
What no hash chain can show is the removal of the newest records, or of the newest day files:
compare the reported count and head hash with an earlier run to see that.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tether.audit.log import LOCK_NAME
from tether.audit.record import GENESIS_HASH, AuditError, RecordProblem, check_line, list_day_files

_EXCERPT_CHARS = 240
LOCK_WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditBreak:
    """The first record that does not hold: where it is and what is wrong with it."""

    file: Path
    line: int  # 1-based within ``file``
    seq: int | None  # the seq the line claims, when it can be read
    problem: str
    excerpt: str  # the start of the offending line, escaped for printing


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    ok: bool
    records: int  # records checked before the first break (all of them when ok)
    files: int
    head: str  # hash of the last good record (GENESIS_HASH for an empty log)
    first_break: AuditBreak | None = None

    def summary(self) -> str:
        if self.first_break is None:
            return (
                f"audit log intact: {self.records} records in {self.files} day files; head {self.head[:16]}…"
            )
        brk = self.first_break
        claimed = "" if brk.seq is None else f" (record seq {brk.seq})"
        return (
            f"audit log BROKEN at {brk.file.name} line {brk.line}{claimed}: {brk.problem}\n"
            f"  {brk.excerpt}\n"
            f"  {self.records} records before it are intact"
        )


@dataclass(slots=True)
class _Chain:
    """Where the walk is: the last good record and the position in the current file."""

    prev: str = GENESIS_HASH
    seq: int = 0
    records: int = 0
    line: int = 0
    offset: int = 0


class _Torn(Exception):
    """The walk met bytes without a trailing newline at the end of a file."""


def verify(home: Path) -> VerifyReport:
    """Walk every day file of ``home``'s audit log in order; see the module docstring."""
    audit_dir = home / "audit"
    files = list_day_files(audit_dir)
    chain = _Chain()
    for index, path in enumerate(files):
        chain.line, chain.offset = 0, 0
        try:
            brk = _walk(path, chain)
        except _Torn:
            if index != len(files) - 1:
                brk = _torn_break(path, chain)
            else:
                return _recheck_under_lock(audit_dir, path, chain)
        if brk is not None:
            return VerifyReport(
                ok=False, records=chain.records, files=len(files), head=chain.prev, first_break=brk
            )
    return VerifyReport(ok=True, records=chain.records, files=len(files), head=chain.prev)


def _recheck_under_lock(audit_dir: Path, path: Path, chain: _Chain) -> VerifyReport:
    """The newest file ended mid-line: hold writers off and read on from that line."""
    try:
        lock_fd = os.open(audit_dir / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        lock_fd = -1  # no lock file we can open: no writer of ours can be running
    try:
        if lock_fd >= 0 and not _lock_shared(lock_fd):
            torn = _torn_break(path, chain)
            held = (
                f"{torn.problem}; a writer has held the audit lock for over {LOCK_WAIT_SECONDS:g} s "
                "(a process stopped mid-append?): run verify again once it has finished"
            )
            return VerifyReport(
                ok=False,
                records=chain.records,
                files=_count(audit_dir),
                head=chain.prev,
                first_break=replace(torn, problem=held),
            )
        files = [p for p in list_day_files(audit_dir) if p.name >= path.name]
        for index, current in enumerate(files):
            if index > 0:
                chain.line, chain.offset = 0, 0
            try:
                brk = _walk(current, chain)
            except _Torn:
                brk = _torn_break(current, chain)
            if brk is not None:
                return VerifyReport(
                    ok=False, records=chain.records, files=_count(audit_dir), head=chain.prev, first_break=brk
                )
        return VerifyReport(ok=True, records=chain.records, files=_count(audit_dir), head=chain.prev)
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)


def _lock_shared(lock_fd: int) -> bool:
    """Take the lock shared, waiting at most ``LOCK_WAIT_SECONDS`` (an append holds it for ~1 ms).

    ``flock`` has no timed wait, so this polls with a growing pause; it runs only when the newest
    file ends mid-line, never on the common path.
    """
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    pause = 0.0005
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _count(audit_dir: Path) -> int:
    return len(list_day_files(audit_dir))


def _walk(path: Path, chain: _Chain) -> AuditBreak | None:
    """Check ``path`` from ``chain.offset``; return the first break, raise ``_Torn`` at a torn end."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise AuditError(f"cannot read the audit file {path}: {exc}; check its permissions") from exc
    with handle:
        handle.seek(chain.offset)
        for raw in handle:
            if not raw.endswith(b"\n"):
                raise _Torn
            problem, seq = _problem(raw[:-1], chain)
            chain.line += 1
            if problem is not None:
                return AuditBreak(file=path, line=chain.line, seq=seq, problem=problem, excerpt=_excerpt(raw))
            chain.offset += len(raw)
    return None


def _problem(line: bytes, chain: _Chain) -> tuple[str | None, int | None]:
    """What is wrong with one line given the chain so far (``None`` = it holds; chain advanced)."""
    if not line:
        return "empty line", None
    try:
        data = check_line(line)
    except RecordProblem as exc:
        return str(exc), None
    seq: int = data["seq"]
    if data["prev"] != chain.prev:
        return (
            f"prev {data['prev'][:16]}… does not match the previous record's hash {chain.prev[:16]}… "
            "(a record before it was removed, reordered or altered)",
            seq,
        )
    if seq != chain.seq + 1:
        return f"seq {seq} does not follow {chain.seq}", seq
    chain.prev, chain.seq = data["hash"], seq
    chain.records += 1
    return None, seq


def _torn_break(path: Path, chain: _Chain) -> AuditBreak:
    with path.open("rb") as handle:
        handle.seek(chain.offset)
        rest = handle.read()
    return AuditBreak(
        file=path,
        line=chain.line + 1,
        seq=None,
        problem=(
            f"incomplete line ({len(rest)} bytes without a newline): a writer stopped mid-write "
            "or the file was cut; the next append discards an unacknowledged torn record"
        ),
        excerpt=_excerpt(rest),
    )


def _excerpt(raw: bytes) -> str:
    text = raw.rstrip(b"\n").decode("ascii", errors="backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…"
