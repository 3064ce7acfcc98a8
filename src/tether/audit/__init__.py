"""tether.audit: the append-only, hash-chained JSONL audit log (``$TETHER_HOME/audit/``).

Write with ``AuditLog(home).append(...)`` (or, from the event loop, ``COMMITTER.append(log, ...)``,
which shares one ``fsync`` among concurrent callers); prove it intact with ``verify(home)``; read it
back with ``query`` / ``export``. See ``docs/audit.md`` for the record format.
"""

from tether.audit.commit import COMMITTER, GroupCommit
from tether.audit.log import AuditLog, Clock, Redactor
from tether.audit.query import AuditFilter, export, query
from tether.audit.record import (
    BREAK_CODES,
    GENESIS_HASH,
    OUTCOMES,
    SOURCES,
    AuditError,
    AuditRecord,
    BreakCode,
    Outcome,
    Source,
)
from tether.audit.seal import DEFAULT_EVERY, SealKey, parse_verification_key
from tether.audit.verify import AuditBreak, VerifyReport, verify

__all__ = [
    "BREAK_CODES",
    "COMMITTER",
    "DEFAULT_EVERY",
    "GENESIS_HASH",
    "OUTCOMES",
    "SOURCES",
    "AuditBreak",
    "AuditError",
    "AuditFilter",
    "AuditLog",
    "AuditRecord",
    "BreakCode",
    "Clock",
    "GroupCommit",
    "Outcome",
    "Redactor",
    "SealKey",
    "Source",
    "VerifyReport",
    "export",
    "parse_verification_key",
    "query",
    "verify",
]
