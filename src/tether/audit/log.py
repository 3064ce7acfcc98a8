"""The append-only, hash-chained audit log: ``$TETHER_HOME/audit/YYYY-MM-DD.jsonl``.

Invariant: ``AuditLog.append`` returns only after its record is one complete line on disk
(``write()`` of the whole line, then ``fsync`` of the file, and of the directory when the file is
new) and chained to the record before it; ``append_bodies`` does the same for several records
under one lock hold and one ``fsync`` (group commit, ``tether.audit.commit``). Such a record is
*acknowledged* and is never lost or rewritten afterwards; a record whose writer died before
``append`` returned may be lost.

How several threads and processes sharing one home keep one chain: every append holds an
exclusive ``flock`` on ``audit/.lock`` (a fresh open file description per call, so threads of one
process exclude each other exactly like processes do, and a crashed holder releases it with its
last fd). Under the lock the appender reads the chain's head from the end of the newest day file —
or, when that file is new or empty, from the newest earlier one, so a new day continues the
previous day's chain — then writes and syncs its line. A process that finds the file exactly as
its own last append left it (inode, size, modification time) knows the head without reading it.

A writer killed inside ``write()`` leaves bytes without a trailing newline (a line never holds a
newline of its own). The next appender settles that tail under the lock: if it is a whole valid
record chaining to the head, it only lacked its newline and is completed; otherwise it is
truncated and the repair is itself logged as a ``host`` record, so the chain stays intact and the
discarded bytes are accounted for.

Secrets never enter the log: the caller passes the command as written (``{{vault.NAME}}``
references unexpanded), and ``redact`` — the vault's masker — runs over every free-text field
before anything is serialised.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.audit.batch import Batch, DayFile, Head, PartialAppend, fsync_dir
from tether.audit.batch import write_all as _write_all  # a module global: tests tear writes here
from tether.audit.lines import complete_end, iter_lines_reverse
from tether.audit.record import (
    FORMAT_VERSION,
    GENESIS_HASH,
    OUTCOMES,
    SOURCES,
    AuditError,
    AuditRecord,
    Outcome,
    RecordProblem,
    Source,
    canonical_json,
    check_line,
    day_name,
    day_names,
    hashed_line,
    iso_time,
    parse_object,
)
from tether.audit.seal import (
    DEFAULT_EVERY,
    KEY_NAME,
    SealKey,
    new_key,
    read_writer_key,
    write_writer_key,
)
from tether.errors import STORAGE_ERRNOS, UsageError

LOCK_NAME = ".lock"
MAX_COMMAND_CHARS = 64 * 1024
MAX_TEXT_CHARS = 4 * 1024
MAX_EXTRA_BYTES = 16 * 1024

Redactor = Callable[[str], str]
Clock = Callable[[], float]


_GENESIS = Head(seq=0, hash=GENESIS_HASH)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tail:
    """Where this process's last append to an audit directory left its newest day file.

    Under the lock, a file with the same inode, size and modification time was not written since
    (every append, completion or truncation changes its size or its time), so its head is the one
    recorded here and the file's end need not be read and parsed again."""

    name: str
    ino: int
    size: int
    mtime_ns: int
    head: Head

    def matches(self, name: str, st: os.stat_result) -> bool:
        return (
            name == self.name
            and st.st_ino == self.ino
            and st.st_size == self.size
            and st.st_mtime_ns == self.mtime_ns
        )


# Keyed by the audit directory; read and replaced only under that directory's lock.
_TAILS: dict[Path, _Tail] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Repair:
    path: Path
    offset: int
    size: int


class AuditLog:
    """Appends records to the audit log of one ``TETHER_HOME``; safe to share across threads."""

    def __init__(self, home: Path, *, redact: Redactor | None = None, clock: Clock = time.time) -> None:
        self.home = home
        self.dir = home / "audit"
        self._redact = redact
        self._clock = clock

    def append(
        self,
        *,
        actor: str,
        source: Source,
        tool: str,
        action: str,
        targets: Sequence[str] = (),
        command: str | None = None,
        outcome: Outcome = "ok",
        detail: str = "",
        reason: str | None = None,
        flags: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> AuditRecord:
        """Log one event and return it once it is durable (see the module docstring).

        ``command`` is the command as written (vault references unexpanded); ``flags`` marks
        exceptional paths such as ``"bypass-guard"``; ``extra`` holds small JSON-able details.
        Raises ``UsageError`` for a bad ``source``/``outcome`` or empty ``actor``/``tool``/``action``,
        ``AuditError`` when the log cannot be written.
        """
        body = self.body(
            actor=actor,
            source=source,
            tool=tool,
            action=action,
            targets=targets,
            command=command,
            outcome=outcome,
            detail=detail,
            reason=reason,
            flags=flags,
            extra=extra,
        )
        return self.append_bodies([body])[0]

    def body(
        self,
        *,
        actor: str,
        source: Source,
        tool: str,
        action: str,
        targets: Sequence[str] = (),
        command: str | None = None,
        outcome: Outcome = "ok",
        detail: str = "",
        reason: str | None = None,
        flags: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The checked, redacted and capped fields of one record, ready for ``append_bodies``:
        every field but the chain ones (``v``, ``seq``, ``time``, ``ts``, ``prev``, ``hash``)."""
        if source not in SOURCES:
            raise UsageError(f"audit source {source!r} is not allowed; use one of {', '.join(SOURCES)}")
        if outcome not in OUTCOMES:
            raise UsageError(f"audit outcome {outcome!r} is not allowed; use one of {', '.join(OUTCOMES)}")
        for name, value in (("actor", actor), ("tool", tool), ("action", action)):
            if not value.strip():
                raise UsageError(f"audit {name} must be a non-empty string")
        # A lone string is one id / one flag, never a sequence of characters.
        targets = [targets] if isinstance(targets, str) else targets
        flags = [flags] if isinstance(flags, str) else flags
        all_flags = [self._text(f) for f in flags]
        logged_command = None
        if command is not None:
            logged_command = self._text(command, MAX_COMMAND_CHARS)
            if len(command) > MAX_COMMAND_CHARS:
                all_flags.append("command-truncated")
        return {
            "actor": self._text(actor),
            "source": source,
            "tool": self._text(tool),
            "action": self._text(action),
            "targets": [self._text(t) for t in targets],
            "command": logged_command,
            "outcome": outcome,
            "detail": self._text(detail),
            "reason": None if reason is None else self._text(reason),
            "flags": all_flags,
            "extra": self._extra(extra or {}),
        }

    def append_bodies(self, bodies: Sequence[dict[str, Any]]) -> list[AuditRecord]:
        """Chain and append ``bodies`` in order under one lock hold and one ``fsync``.

        Returns once every one of them is durable. On failure an ``AuditAppendError`` says which
        of them were made durable before it (``durable``: a prefix, usually empty — only a seal
        falling inside the batch syncs early); nothing of the others is left in the file.
        """
        written = self._append_bodies(bodies, wait=True)
        assert written is not None
        return written

    def append_unless_locked(self, bodies: Sequence[dict[str, Any]]) -> list[AuditRecord] | None:
        """``append_bodies``, or ``None`` with nothing written when another appender holds the
        lock (for a caller that must not wait through someone else's ``fsync``)."""
        return self._append_bodies(bodies, wait=False)

    def _append_bodies(self, bodies: Sequence[dict[str, Any]], *, wait: bool) -> list[AuditRecord] | None:
        try:
            return self._append_locked(bodies, wait=wait)
        except OSError as exc:
            durable = exc.durable if isinstance(exc, PartialAppend) else []
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            if cause.errno in (errno.EMFILE, errno.ENFILE):
                fix = (
                    "; this process has no file descriptor left: end shells or jobs no longer needed, "
                    "or raise its limit (ulimit -n)"
                )
            elif cause.errno in STORAGE_ERRNOS:
                # "[Errno 28] short write …" said neither that the disk was full nor how full.
                reason = os.strerror(cause.errno)
                if cause.strerror and cause.strerror != reason:
                    reason = f"{reason}: {cause.strerror}"
                raise AuditAppendError(
                    f"cannot append to the audit log in {self.dir}: {reason}; free space on its file "
                    f"system{_room(self.dir)}, or make it writable",
                    durable=durable,
                ) from exc
            elif cause.errno is not None:
                fix = "; check free disk space and the directory's permissions"
            else:
                fix = ""  # tether's own words (the sealing key): they say what to do
            raise AuditAppendError(
                f"cannot append to the audit log in {self.dir}: {exc}{fix}", durable=durable
            ) from exc

    # -- building the record -------------------------------------------------------------------

    def _text(self, value: str, limit: int = MAX_TEXT_CHARS) -> str:
        if self._redact is not None:
            value = self._redact(value)
        if len(value) > limit:
            value = f"{value[:limit]}…[{len(value) - limit} more characters not logged]"
        return value

    def _extra(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        def clean(value: Any) -> Any:
            if isinstance(value, str):
                return self._text(value)
            if isinstance(value, Mapping):
                return {str(k): clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            if value is None or isinstance(value, bool | int | float):
                return value
            raise UsageError(f"audit extra holds a {type(value).__name__}; use JSON values only")

        cleaned = clean(dict(extra))
        try:
            size = len(canonical_json(cleaned))
        except ValueError as exc:
            raise UsageError(f"audit extra holds a value JSON cannot represent: {exc}") from exc
        if size > MAX_EXTRA_BYTES:
            # Logging something is better than failing the caller's operation over a detail.
            return {"omitted": f"extra was {size} bytes, over the {MAX_EXTRA_BYTES}-byte limit"}
        assert isinstance(cleaned, dict)
        return cleaned

    # -- writing under the lock ----------------------------------------------------------------

    def _append_locked(self, bodies: Sequence[dict[str, Any]], *, wait: bool) -> list[AuditRecord] | None:
        lock_fd = self._open_lock()
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # only without ``wait``: someone else appends now
            with ExitStack() as stack:
                # The clock is read under the lock so records are filed in the order they are chained.
                ts = int(self._clock() * 1000)
                target, head, repairs = self._settle(day_name(ts), stack)
                batch = Batch(
                    directory=self.dir,
                    write=self._write,
                    seal_body=self._seal_body,
                    day=target,
                    head=head,
                    ts=ts,
                    sealer=read_writer_key(self.dir),
                )
                if repairs:
                    # A repair is durable on its own: the bytes it accounts for are already gone.
                    for repair in repairs:
                        batch.write(self._repair_body(repair))
                    batch.sync()
                ours = len(batch.durable)
                _TAILS.pop(self.dir, None)  # until this batch is durable, the file is not as recorded
                try:
                    written = [batch.write(body) for body in bodies]
                    batch.sync()
                except PartialAppend as exc:
                    exc.durable = exc.durable[ours:]  # the caller's records only
                    raise
                st = os.fstat(target.fd)
                _TAILS[self.dir] = _Tail(
                    name=target.path.name,
                    ino=st.st_ino,
                    size=st.st_size,
                    mtime_ns=st.st_mtime_ns,
                    head=batch.head,
                )
                return written
        finally:
            os.close(lock_fd)  # releases the flock

    def setup_keys(self, *, every: int = DEFAULT_EVERY) -> SealKey:
        """Start sealing: store the writer's first key and return it — the verification key.

        Refuses when sealing is already set up (a second setup would let whoever runs it replace
        the key the verifier trusts without notice).
        """
        lock_fd = self._open_lock()
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if read_writer_key(self.dir) is not None:
                raise UsageError(
                    f"sealing is already set up for {self.dir} ({KEY_NAME} exists); verify with the key "
                    "printed then, or move the audit directory aside to start a new log"
                )
            with ExitStack() as stack:
                ts = int(self._clock() * 1000)
                target, head, repairs = self._settle(day_name(ts), stack)
                batch = Batch(
                    directory=self.dir,
                    write=self._write,
                    seal_body=self._seal_body,
                    day=target,
                    head=head,
                    ts=ts,
                    sealer=None,
                )
                for repair in repairs:  # settling discarded a torn tail: account for it as always
                    batch.write(self._repair_body(repair))
                batch.sync()
                head = batch.head
            key = new_key(every=every, head_seq=head.seq)
            write_writer_key(self.dir, key)
            return key
        finally:
            os.close(lock_fd)

    def _seal_body(self, extra: dict[str, Any]) -> dict[str, Any]:
        return self.body(
            actor="host",
            source="host",
            tool="audit",
            action="seal",
            targets=(),
            command=None,
            outcome="ok",
            detail=f"forward-secure seal {extra['index']} over every record before it",
            reason=None,
            flags=(),
            extra=extra,
        )

    def _open_lock(self) -> int:
        """The lock file, opened; the directories are made (and made durable) when it is missing."""
        path = f"{self.dir}/{LOCK_NAME}"
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            pass  # no audit directory yet: its absence is learnt from the open, not asked first
        self._ensure_dir()
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _ensure_dir(self) -> None:
        if self.dir.is_dir():
            return
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            self.dir.mkdir(mode=0o700)
        except FileExistsError:
            return
        fsync_dir(self.home)

    def _settle(self, today: str, stack: ExitStack) -> tuple[DayFile, Head, list[_Repair]]:
        """Open the file to write and find the chain head, settling torn tails on the way."""
        names = day_names(self.dir)
        # A clock that steps back never reorders the chain: records go on into the newest file.
        target_name = max(today, names[-1]) if names else today
        visited = [self._open(self.dir / target_name, stack, known=_TAILS.get(self.dir))]
        # Back through the earlier files, newest first, while none has given the head yet.
        for name in reversed(names):
            if visited[-1].head is not None:
                break
            if name < target_name:
                visited.append(self._open(self.dir / name, stack))
        head = visited[-1].head or _GENESIS
        repairs: list[_Repair] = []
        # Oldest first: a torn record can only chain to the head found before it.
        for day in reversed(visited):
            if day.torn:
                completed = _completed_torn(day.torn, head)
                if completed is not None:
                    _write_all(day.fd, b"\n")
                    os.fsync(day.fd)
                    head = completed
                else:
                    os.ftruncate(day.fd, day.end)
                    os.fsync(day.fd)
                    repairs.append(_Repair(path=day.path, offset=day.end, size=len(day.torn)))
            elif day.head is not None:
                head = day.head
        return visited[0], head, repairs

    def _open(self, path: Path, stack: ExitStack, *, known: _Tail | None = None) -> DayFile:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        stack.callback(os.close, fd)
        st = os.fstat(fd)
        if known is not None and known.matches(path.name, st):
            return DayFile(path=path, fd=fd, end=st.st_size, torn=b"", head=known.head)
        size = st.st_size
        end = complete_end(fd, size)
        torn = os.pread(fd, size - end, end) if size > end else b""
        head = None
        for _offset, line in iter_lines_reverse(fd, end):
            head = _head_of(line)
            if head is not None:
                break
        return DayFile(path=path, fd=fd, end=end, torn=torn, head=head)

    def _write(self, day: DayFile, body: dict[str, Any], head: Head, ts: int) -> AuditRecord:
        """One ``write()`` of one whole line; the caller syncs the batch."""
        seq, moment = head.seq + 1, iso_time(ts)
        record = {**body, "v": FORMAT_VERSION, "seq": seq, "time": moment, "ts": ts, "prev": head.hash}
        digest, line = hashed_line(record)
        _write_all(day.fd, line.encode("ascii") + b"\n")
        # ``body`` is ``AuditLog.body``'s: its fields are checked already (and the line is written).
        return AuditRecord.from_checked({**record, "hash": digest})

    def _repair_body(self, repair: _Repair) -> dict[str, Any]:
        return self.body(
            actor="host",
            source="host",
            tool="audit",
            action="repair",
            targets=(),
            command=None,
            outcome="ok",
            detail=(
                f"discarded {repair.size} bytes of an unacknowledged record at the end of "
                f"{repair.path.name} (its writer stopped mid-write)"
            ),
            reason=None,
            flags=(),
            extra={"file": repair.path.name, "offset": repair.offset, "bytes": repair.size},
        )


class AuditAppendError(AuditError):
    """The log could not be appended to; ``durable`` are the records of the call that were."""

    def __init__(self, message: str, *, durable: list[AuditRecord]) -> None:
        super().__init__(message)
        self.durable = durable


def _room(directory: Path) -> str:
    try:
        found = os.statvfs(directory)
    except OSError:
        return ""
    return f" ({found.f_bavail * found.f_frsize // 1024} KiB free)"


def _head_of(line: bytes) -> Head | None:
    """The chain position a complete line claims, or ``None`` if it is not a record at all."""
    try:
        data = parse_object(line)
    except RecordProblem:
        return None
    seq, digest = data.get("seq"), data.get("hash")
    if isinstance(seq, int) and not isinstance(seq, bool) and isinstance(digest, str) and len(digest) == 64:
        return Head(seq=seq, hash=digest)
    return None


def _completed_torn(torn: bytes, head: Head) -> Head | None:
    """The head a torn tail becomes if it is a whole valid record that only lacks its newline."""
    try:
        data = check_line(torn)
    except RecordProblem:
        return None
    if data["prev"] != head.hash or data["seq"] != head.seq + 1:
        return None
    return Head(seq=data["seq"], hash=data["hash"])
