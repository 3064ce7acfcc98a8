"""``tether audit``: prove the audit log intact (``verify``) and read it (``show``).

The arguments are defined in ``audit_cmd``.

Invariant: both subcommands only read the log — verifying or viewing it is not itself an audited
action, and never repairs or rewrites it. ``verify`` exits 0 when the chain holds and 1 at the
first broken record, which it prints; bad flags exit 2 (argparse, or a ``UsageError``).
Everything printed from a record is escaped, so a logged command cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.audit import AuditLog, AuditRecord, export, parse_verification_key, query, verify
from tether.config import resolve_home
from tether.errors import UsageError


def verify_log(args: argparse.Namespace) -> int:
    text = args.key
    if args.key_file:
        try:
            text = Path(args.key_file).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--key-file {args.key_file}: cannot read it ({exc})") from exc
    key = parse_verification_key(text) if text else None
    report = verify(resolve_home(), key=key)
    print(report.summary())
    return 0 if report.ok else 1


def setup_keys(args: argparse.Namespace) -> int:
    key = AuditLog(resolve_home()).setup_keys(every=args.every)
    print(
        "forward-secure sealing is on: every "
        f"{key.every}th record is a seal, the first at seq {key.index * key.every}.\n"
        "Verification key (shown once; store it OFF this machine, e.g. in a password manager):\n\n"
        f"    {key.text()}\n\n"
        "Prove the log later with: tether audit verify --key KEY"
    )
    return 0


def show(args: argparse.Namespace) -> int:
    home = resolve_home()
    filters: dict[str, Any] = {
        "actor": args.actor,
        "source": args.source,
        "shell": args.shell,
        "days": args.days,
        "limit": args.limit,
    }
    if args.json:
        for line in export(home, **filters):
            print(line)
        return 0
    records = query(home, **filters)
    if not records:
        print(f"no audit records in the last {args.days} day(s) match")
        return 0
    for record in records:
        print(format_record(record))
    return 0


def format_record(record: AuditRecord) -> str:
    """One line per record: time, seq, who, what, where, outcome, then command/reason/flags."""
    parts = [
        record.time,
        f"#{record.seq}",
        f"{record.source}:{record.actor}",
        f"{record.tool} {record.action}",
    ]
    if record.targets:
        parts.append(",".join(record.targets))
    parts.append(record.outcome + (f" ({record.detail})" if record.detail else ""))
    if record.command is not None:
        parts.append(f"$ {record.command}")
    if record.reason is not None:
        parts.append(f"reason={record.reason}")
    if record.flags:
        parts.append("flags=" + ",".join(record.flags))
    return "  ".join(_printable(p) for p in parts)


def _printable(text: str) -> str:
    # json.dumps escapes control characters (ESC, CR, newlines); strip its quotes.
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
