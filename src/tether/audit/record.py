"""One audit record: its fields, its canonical bytes, its hash, and where it is filed.

Invariant: a record's line in the log is exactly ``canonical_json(record)`` followed by ``\\n`` —
sorted keys, no whitespace, ASCII only (every control character, newline and non-ASCII character
is a JSON escape) — so a line can never contain a newline whatever the command holds. ``hash`` is
the SHA-256 of the canonical JSON of the record *without* ``hash``; ``prev`` is the previous
record's ``hash`` (``GENESIS_HASH`` for the first). Any change to a single byte of a line either
breaks the JSON, changes a field (and so the hash), or makes the line non-canonical (``"\\u00e9"``
versus ``"\\u00E9"``); ``check_line`` rejects all three.

Day files are named by the UTC date of the record's time: ``audit/YYYY-MM-DD.jsonl``. Their names
sort in chain order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args

from tether.errors import TetherError

FORMAT_VERSION = 1
GENESIS_HASH = "0" * 64

Source = Literal["tool", "panel", "host", "cli"]
Outcome = Literal["ok", "error", "refused", "blocked", "dry-run", "timeout", "cancelled"]
SOURCES: tuple[str, ...] = get_args(Source)
OUTCOMES: tuple[str, ...] = get_args(Outcome)

FIELDS: frozenset[str] = frozenset(
    {
        "v",
        "seq",
        "time",
        "ts",
        "actor",
        "source",
        "tool",
        "action",
        "targets",
        "command",
        "outcome",
        "detail",
        "reason",
        "flags",
        "extra",
        "prev",
        "hash",
    }
)

DAY_FILE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\.jsonl$")
_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")


class AuditError(TetherError):
    """The audit log cannot be written or read (disk full, permissions, I/O error)."""

    code = "AUDIT_UNAVAILABLE"


# What ``verify`` found wrong, as a stable code (its ``AuditBreak.code``); the message says more.
BreakCode = Literal[
    "NOT_JSON",  # the line is not a JSON object in ASCII
    "NOT_CANONICAL",  # its bytes differ from the canonical form of what they parse to (edited)
    "BAD_FIELD",  # a field is missing, unknown or of the wrong type
    "HASH_MISMATCH",  # ``hash`` is not the hash of the rest (the record was altered)
    "EMPTY_LINE",
    "PREV_MISMATCH",  # ``prev`` is not the previous record's hash (removed, reordered, inserted)
    "DUPLICATE",  # a copy of the record before it
    "SEQ_GAP",  # ``seq`` does not follow the previous record's
    "TORN_TAIL",  # the newest file ends mid-line: a writer stopped mid-write (the next append settles it)
    "CUT_FILE",  # an older file ends mid-line: it was cut or damaged (no append repairs it)
    "WRITER_STALLED",  # the newest file ends mid-line and its writer holds the lock for too long
    "SEAL_MISSING",  # a seal position holds another record (with the verification key)
    "SEAL_INVALID",  # a seal does not verify with the key: history was rewritten
]
BREAK_CODES: tuple[BreakCode, ...] = get_args(BreakCode)


class RecordProblem(ValueError):
    """Why one line of the log is not a valid record (the message is shown by ``verify``)."""

    def __init__(self, message: str, *, code: BreakCode = "BAD_FIELD") -> None:
        super().__init__(message)
        self.code: BreakCode = code


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One acknowledged event. ``seq`` counts records along the whole chain, starting at 1."""

    seq: int
    time: str  # ISO 8601 UTC with milliseconds, e.g. 2026-11-30T04:42:09.123Z
    ts: int  # the same instant in epoch milliseconds
    actor: str  # conversation id, "panel", "cli" or "host"
    source: str  # one of SOURCES
    tool: str
    action: str
    targets: tuple[str, ...]
    command: str | None  # as written: vault references unexpanded
    outcome: str  # one of OUTCOMES
    detail: str
    reason: str | None
    flags: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)
    prev: str
    hash: str
    v: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The record as stored (JSON types: lists, not tuples)."""
        return {
            "v": self.v,
            "seq": self.seq,
            "time": self.time,
            "ts": self.ts,
            "actor": self.actor,
            "source": self.source,
            "tool": self.tool,
            "action": self.action,
            "targets": list(self.targets),
            "command": self.command,
            "outcome": self.outcome,
            "detail": self.detail,
            "reason": self.reason,
            "flags": list(self.flags),
            "extra": dict(self.extra),
            "prev": self.prev,
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditRecord:
        """Build from a stored object; ``RecordProblem`` names the first missing or mistyped field."""
        check_fields(data)
        return cls.from_checked(data)

    @classmethod
    def from_checked(cls, data: Mapping[str, Any]) -> AuditRecord:
        """Build from an object whose fields are known to be right (``check_fields``, or a body
        ``AuditLog.body`` checked before its line was written)."""
        return cls(
            v=data["v"],
            seq=data["seq"],
            time=data["time"],
            ts=data["ts"],
            actor=data["actor"],
            source=data["source"],
            tool=data["tool"],
            action=data["action"],
            targets=tuple(data["targets"]),
            command=data["command"],
            outcome=data["outcome"],
            detail=data["detail"],
            reason=data["reason"],
            flags=tuple(data["flags"]),
            extra=dict(data["extra"]),
            prev=data["prev"],
            hash=data["hash"],
        )


def canonical_json(obj: Mapping[str, Any]) -> str:
    """Sorted keys, no whitespace, ASCII only; NaN and infinities are refused (not JSON)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def record_hash(body: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``body`` without its ``hash`` key."""
    unhashed = {k: v for k, v in body.items() if k != "hash"}
    return hashlib.sha256(canonical_json(unhashed).encode("ascii")).hexdigest()


def hashed_line(record: Mapping[str, Any]) -> tuple[str, str]:
    """``record``'s hash and its canonical line with that hash, from one encoding: ``record`` holds
    every field but ``hash`` (``record_hash`` and ``canonical_json`` of the record with it give the
    same two). ``hash`` sorts between ``flags`` and ``outcome``, and no field after ``extra`` (the
    only one holding objects) can hold ``,"outcome":`` (a JSON string escapes its quotes), so the
    last such text is the record's own key, where the hash goes."""
    text = canonical_json(record)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    at = text.rindex(',"outcome":')
    return digest, f'{text[:at]},"hash":"{digest}"{text[at:]}'


_LAST_MS: Final = 253402300799999  # 9999-12-31T23:59:59.999Z, the last instant ``datetime`` names


def iso_time(ts_ms: int) -> str:
    if 0 <= ts_ms <= _LAST_MS:
        # The same text as the ``datetime`` form below, in a third of its time (every append and
        # every record verified formats one).
        seconds, millis = divmod(ts_ms, 1000)
        t = time.gmtime(seconds)
        return f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:{t[5]:02d}.{millis:03d}Z"
    moment = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def day_name(ts_ms: int) -> str:
    """The day file a record made at ``ts_ms`` belongs to (UTC date)."""
    if 0 <= ts_ms <= _LAST_MS:
        return iso_time(ts_ms)[:10] + ".jsonl"
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d") + ".jsonl"


def day_of(name: str) -> date | None:
    """The date a day file's name stands for, or ``None`` when the name is not a day file."""
    match = DAY_FILE_RE.match(name)
    if match is None:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


@functools.lru_cache(maxsize=8192)
def _is_day_name(name: str) -> bool:
    # A name is a day file's or not for good: checked once (a year of names took 0.26 ms a listing).
    return day_of(name) is not None


def day_names(audit_dir: Path) -> list[str]:
    """The names of every day file, in chain order (ISO dates sort lexically); other files are
    ignored. Names, not paths: an append lists the directory every time, and a year of day files
    made into checked paths cost it ~1.5 ms."""
    try:
        names = [n for n in os.listdir(audit_dir) if _is_day_name(n)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        message = f"cannot list the audit directory {audit_dir}: {exc}; check its permissions"
        raise AuditError(message) from exc
    names.sort()
    return names


def list_day_files(audit_dir: Path) -> list[Path]:
    """Every day file in chain order (see ``day_names``)."""
    return [audit_dir / n for n in day_names(audit_dir)]


def check_fields(data: Mapping[str, Any]) -> None:
    """Raise ``RecordProblem`` unless ``data`` has exactly the record fields with JSON-correct types."""
    missing = sorted(FIELDS - data.keys())
    if missing:
        raise RecordProblem(f"field {missing[0]!r} is missing")
    unknown = sorted(data.keys() - FIELDS)
    if unknown:
        raise RecordProblem(f"unknown field {unknown[0]!r}")
    for name in ("v", "seq", "ts"):
        if not _is_int(data[name]):
            raise RecordProblem(f"field {name!r} must be an integer")
    if data["seq"] < 1:
        raise RecordProblem("field 'seq' must be at least 1")
    for name in ("time", "actor", "source", "tool", "action", "outcome", "detail"):
        if not isinstance(data[name], str):
            raise RecordProblem(f"field {name!r} must be a string")
    for name in ("command", "reason"):
        if data[name] is not None and not isinstance(data[name], str):
            raise RecordProblem(f"field {name!r} must be a string or null")
    for name in ("targets", "flags"):
        value = data[name]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise RecordProblem(f"field {name!r} must be a list of strings")
    if not isinstance(data["extra"], dict):
        raise RecordProblem("field 'extra' must be an object")
    for name in ("prev", "hash"):
        if not isinstance(data[name], str) or _HEX64_RE.match(data[name]) is None:
            raise RecordProblem(f"field {name!r} must be 64 lowercase hex digits")
    if data["time"] != iso_time(data["ts"]):
        raise RecordProblem(f"field 'time' {data['time']!r} does not match 'ts' {data['ts']}")


def check_line(line: bytes) -> dict[str, Any]:
    """Parse one line (without its newline) and prove it is a self-consistent record.

    Checks, in order: JSON object, canonical bytes, fields, hash. The chain (``prev``, ``seq``) is
    the caller's business. Raises ``RecordProblem`` saying what is wrong.
    """
    data = parse_object(line)
    try:
        again = canonical_json(data).encode("ascii")
    except ValueError as exc:
        raise RecordProblem(f"line holds a value JSON cannot represent: {exc}", code="NOT_JSON") from exc
    if again != line:
        raise RecordProblem("line is not in canonical form (its bytes were edited)", code="NOT_CANONICAL")
    check_fields(data)
    if record_hash(data) != data["hash"]:
        raise RecordProblem(
            "hash does not match the record's content (the record was altered)", code="HASH_MISMATCH"
        )
    return data


def parse_object(line: bytes) -> dict[str, Any]:
    """``json.loads`` of one line that must be a JSON object; ``RecordProblem`` otherwise."""
    try:
        data = json.loads(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordProblem(f"line is not valid JSON ({exc})", code="NOT_JSON") from exc
    if not isinstance(data, dict):
        raise RecordProblem("line is not a JSON object", code="NOT_JSON")
    return data


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
