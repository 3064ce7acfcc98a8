"""Proving the audit log intact: every line a valid record, every record chained to the one before.

Invariant: ``verify`` reports the *first* broken record in chain order (day files by name, lines
in file order), with a stable ``BreakCode`` saying what is wrong, or, when there is none, that the
whole chain holds with its record count. It never writes: a torn tail of the newest file is
reported, not repaired (the next append settles it); one of an older file is ``CUT_FILE``, which
no append repairs (appends go to the newest file).

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

With the verification key (``tether audit setup-keys``, see ``seal``) the walk also checks every
forward-secure seal: each required position holds a seal whose MAC the key proves. A chain whose
hashes were all recomputed after an edit fails at the first seal after the edit, and the break
reported is the first record past the last seal that holds — everything before it is proven.
"""

from __future__ import annotations

import fcntl
import hmac
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.audit.log import LOCK_NAME
from tether.audit.record import (
    GENESIS_HASH,
    AuditError,
    BreakCode,
    RecordProblem,
    check_line,
    list_day_files,
)
from tether.audit.seal import SealKey

_EXCERPT_CHARS = 240
LOCK_WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditBreak:
    """The first record that does not hold: where it is and what is wrong with it."""

    file: Path
    line: int  # 1-based within ``file``
    seq: int | None  # the seq the line claims, when it can be read
    code: BreakCode  # what is wrong, as a stable code (``record.BreakCode``)
    problem: str
    excerpt: str  # the start of the offending line, escaped for printing

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file.name,
            "line": self.line,
            "seq": self.seq,
            "code": self.code,
            "problem": self.problem,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    ok: bool
    records: int  # records checked before the first break (all of them when ok)
    files: int
    head: str  # hash of the last good record (GENESIS_HASH for an empty log)
    first_break: AuditBreak | None = None
    sealed_through: int | None = None  # seq of the last seal the key proved (None: not checked)
    seals_seen: int = 0  # seal records met, proven or not

    def summary(self) -> str:
        seals = self._seal_line()
        if self.first_break is None:
            return (
                f"audit log intact: {self.records} records in {self.files} day files; head {self.head[:16]}…"
                + seals
            )
        brk = self.first_break
        claimed = "" if brk.seq is None else f" (record seq {brk.seq})"
        return (
            f"audit log BROKEN at {brk.file.name} line {brk.line}{claimed} [{brk.code}]: {brk.problem}\n"
            f"  {brk.excerpt}\n"
            f"  {self.records} records before it are intact" + seals
        )

    def _seal_line(self) -> str:
        if self.sealed_through is None:
            if self.seals_seen:
                return f"\n  {self.seals_seen} seals not checked: give --key to prove the history"
            return ""
        if self.sealed_through == 0:
            return "\n  no seal proven yet (sealing began after the newest record)"
        return f"\n  proven by its seals through record seq {self.sealed_through}"


@dataclass(slots=True)
class _Chain:
    """Where the walk is: the last good record and the position in the current file."""

    prev: str = GENESIS_HASH
    seq: int = 0
    records: int = 0
    line: int = 0
    offset: int = 0
    key: SealKey | None = None
    sealed: int = 0  # seq of the last proven seal
    seals: int = 0
    after_seal: tuple[Path, int, int, str] | None = None  # the first record past the last proven seal


def _report(chain: _Chain, files: int, brk: AuditBreak | None) -> VerifyReport:
    return VerifyReport(
        ok=brk is None,
        records=chain.records,
        files=files,
        head=chain.prev,
        first_break=brk,
        sealed_through=None if chain.key is None else chain.sealed,
        seals_seen=chain.seals,
    )


class _Torn(Exception):
    """The walk met bytes without a trailing newline at the end of a file."""


def verify(home: Path, *, key: SealKey | None = None) -> VerifyReport:
    """Walk every day file of ``home``'s audit log in order; see the module docstring."""
    audit_dir = home / "audit"
    files = list_day_files(audit_dir)
    chain = _Chain(key=key)
    for index, path in enumerate(files):
        chain.line, chain.offset = 0, 0
        try:
            brk = _walk(path, chain)
        except _Torn:
            if index != len(files) - 1:
                brk = _torn_break(path, chain, newest=False)
            else:
                return _recheck_under_lock(audit_dir, path, chain)
        if brk is not None:
            return _report(chain, len(files), brk)
    return _report(chain, len(files), None)


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
            return _report(chain, _count(audit_dir), replace(torn, code="WRITER_STALLED", problem=held))
        files = [p for p in list_day_files(audit_dir) if p.name >= path.name]
        for index, current in enumerate(files):
            if index > 0:
                chain.line, chain.offset = 0, 0
            try:
                brk = _walk(current, chain)
            except _Torn:
                brk = _torn_break(current, chain, newest=index == len(files) - 1)
            if brk is not None:
                return _report(chain, _count(audit_dir), brk)
        return _report(chain, _count(audit_dir), None)
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
            prev = chain.prev
            problem, seq, data = _problem(raw[:-1], chain)
            chain.line += 1
            if problem is not None:
                code, text = problem
                return AuditBreak(
                    file=path, line=chain.line, seq=seq, code=code, problem=text, excerpt=_excerpt(raw)
                )
            if chain.after_seal is None:
                chain.after_seal = (path, chain.line, chain.seq, _excerpt(raw))
            sealed = _seal_problem(data, prev, chain)
            if sealed is not None:
                return sealed
            chain.offset += len(raw)
    return None


def _seal_problem(data: dict[str, Any], prev: str, chain: _Chain) -> AuditBreak | None:
    """Check the seal a record's position needs (with a key); a failure is reported at the first
    record past the last proven seal, since any record from there on may be the altered one."""
    is_seal = data["source"] == "host" and data["tool"] == "audit" and data["action"] == "seal"
    chain.seals += is_seal
    key, seq = chain.key, chain.seq
    if key is None or seq % key.every or seq // key.every < key.index:
        return None
    index = seq // key.every
    chain.key = key = key.at(index)  # forward only: one step per seal, not a walk from the start
    extra = data["extra"] if isinstance(data["extra"], dict) else {}
    code: BreakCode = "SEAL_INVALID"
    if not is_seal:
        code = "SEAL_MISSING"
        why = f"record seq {seq} should be seal {index} but is a {data['tool']} {data['action']} record"
    elif extra.get("index") != index or not hmac.compare_digest(str(extra.get("mac")), key.mac(prev, seq)):
        why = f"seal {index} (record seq {seq}) does not verify with the key"
    else:
        chain.sealed, chain.after_seal = seq, None
        return None
    assert chain.after_seal is not None
    path, line, first, excerpt = chain.after_seal
    since = f"the last proven seal is at seq {chain.sealed}" if chain.sealed else "no earlier seal is proven"
    return AuditBreak(
        file=path,
        line=line,
        seq=first,
        code=code,
        problem=(
            f"{why}: a record from seq {first} on was altered, removed, inserted or reordered and the "
            f"chain's hashes recomputed ({since}; records before seq {first} are proven)"
        ),
        excerpt=excerpt,
    )


def _problem(line: bytes, chain: _Chain) -> tuple[tuple[BreakCode, str] | None, int | None, dict[str, Any]]:
    """What is wrong with one line given the chain so far (``None`` = it holds; chain advanced)."""
    if not line:
        return ("EMPTY_LINE", "empty line"), None, {}
    try:
        data = check_line(line)
    except RecordProblem as exc:
        return (exc.code, str(exc)), None, {}
    seq: int = data["seq"]
    if data["hash"] == chain.prev and chain.records:
        return ("DUPLICATE", f"a copy of the record before it (seq {chain.seq})"), seq, data
    if data["prev"] != chain.prev:
        why = (
            f"prev {data['prev'][:16]}… does not match the previous record's hash {chain.prev[:16]}… "
            "(a record before it was removed, reordered or altered)"
        )
        return ("PREV_MISMATCH", why), seq, data
    if seq != chain.seq + 1:
        return ("SEQ_GAP", f"seq {seq} does not follow {chain.seq}"), seq, data
    chain.prev, chain.seq = data["hash"], seq
    chain.records += 1
    return None, seq, data


def _torn_break(path: Path, chain: _Chain, *, newest: bool = True) -> AuditBreak:
    with path.open("rb") as handle:
        handle.seek(chain.offset)
        rest = handle.read()
    if newest:
        code: BreakCode = "TORN_TAIL"
        why = (
            "a writer stopped mid-write or the file was cut; the next append discards an "
            "unacknowledged torn record"
        )
    else:
        # Appends go to the newest file: nothing will ever settle the end of an older one.
        code, why = "CUT_FILE", "a later day file follows, so the file was cut or its end damaged"
    return AuditBreak(
        file=path,
        line=chain.line + 1,
        seq=None,
        code=code,
        problem=f"incomplete line ({len(rest)} bytes without a newline): {why}",
        excerpt=_excerpt(rest),
    )


def _excerpt(raw: bytes) -> str:
    text = raw.rstrip(b"\n").decode("ascii", errors="backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…"
