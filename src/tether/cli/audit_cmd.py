"""``tether audit``: prove the audit log intact (``verify``) and read it (``show``).

Invariant: both subcommands only read the log, through the people-only tools ``audit_verify`` and
``audit_show`` (as ``cli``) — verifying or viewing it is not itself an audited action, and never
repairs or rewrites it. ``verify`` exits 0 when the chain holds and 1 at the
first broken record, which it prints; bad flags exit 2 (argparse, or a ``UsageError``).
Everything printed from a record is escaped, so a logged command cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.audit import DEFAULT_EVERY, SOURCES
from tether.cli.tools_door import call_tool
from tether.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="verify and read the hash-chained audit log",
        description="The audit log: one JSONL record per tool call and panel/CLI action, "
        "in $TETHER_HOME/audit/YYYY-MM-DD.jsonl, each holding the previous record's hash.",
    )
    sub = parser.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    check = sub.add_parser(
        "verify",
        help="check every record and the hash chain; exit 0 intact, 1 broken",
        description="Check every line of every day file: valid record, hash, link to the previous record. "
        "Exit status 0 when intact, 1 at the first broken record (printed).",
    )
    check.add_argument(
        "--key",
        metavar="KEY",
        help="the verification key printed by setup-keys: also prove every forward-secure seal",
    )
    check.add_argument("--key-file", metavar="PATH", help="read the verification key from this file")
    check.set_defaults(func=_verify)

    keys = sub.add_parser(
        "setup-keys",
        help="start forward-secure sealing; prints the verification key once",
        description="Store a sealing key in the audit directory and print the matching verification key. "
        "Every EVERY-th record is then a seal that only the verification key can prove; the key on disk "
        "moves forward with each seal, so whoever reads it later cannot re-seal older records. Keep the "
        "verification key off this machine (it proves the log; with it, the log can be rewritten).",
    )
    keys.add_argument(
        "--every", type=int, default=DEFAULT_EVERY, help=f"seal every N records (default {DEFAULT_EVERY})"
    )
    keys.set_defaults(func=_setup_keys)

    show = sub.add_parser(
        "show",
        help="print recent records, oldest first",
        description="Print the newest matching records (at most --limit), oldest first.",
    )
    show.add_argument("--days", type=int, default=1, help="look back this many days (1-3650, default 1)")
    show.add_argument("--actor", help="only records by this actor (a conversation id, panel or cli)")
    show.add_argument("--source", choices=SOURCES, help="only records from this source")
    show.add_argument("--shell", metavar="ID", help="only records that target this shell id")
    show.add_argument("--limit", type=int, default=50, help="at most this many records (default 50)")
    show.add_argument("--json", action="store_true", help="print the raw JSONL lines exactly as stored")
    show.set_defaults(func=_show)


def _verify(args: argparse.Namespace) -> int:
    text = args.key
    if args.key_file:
        try:
            text = Path(args.key_file).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--key-file {args.key_file}: cannot read it ({exc})") from exc
    result = call_tool("audit_verify", {"key": text.strip()} if text else {})
    print(result.structured["summary"])
    return 0 if result.structured["ok"] else 1


def _setup_keys(args: argparse.Namespace) -> int:
    key = call_tool("audit_setup_keys", {"every": args.every}).structured
    print(
        "forward-secure sealing is on: every "
        f"{key['every']}th record is a seal, the first at seq {key['firstSeq']}.\n"
        "Verification key (shown once; store it OFF this machine, e.g. in a password manager):\n\n"
        f"    {key['key']}\n\n"
        "Prove the log later with: tether audit verify --key KEY"
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    filters: dict[str, Any] = {"days": args.days, "limit": args.limit, "export": args.json}
    for key in ("actor", "source", "shell"):
        if getattr(args, key):
            filters[key] = getattr(args, key)
    result = call_tool("audit_show", filters)
    if args.json:
        for line in result.structured["lines"]:
            print(line)
        return 0
    records = result.structured["records"]
    if not records:
        print(f"no audit records in the last {args.days} day(s) match")
        return 0
    for record in records:
        print(format_record(record))
    return 0


def format_record(record: dict[str, Any]) -> str:
    """One line per record: time, seq, who (and its client), what, where, outcome, then
    command/reason/flags."""
    who = f"{record['source']}:{record['actor']}"
    if record.get("client"):
        who += f" ({record['client']})"
    parts = [record["time"], f"#{record['seq']}", who, f"{record['tool']} {record['action']}"]
    if record["targets"]:
        parts.append(",".join(record["targets"]))
    parts.append(record["outcome"] + (f" ({record['detail']})" if record["detail"] else ""))
    if record["command"] is not None:
        parts.append(f"$ {record['command']}")
    if record["reason"] is not None:
        parts.append(f"reason={record['reason']}")
    if record["flags"]:
        parts.append("flags=" + ",".join(record["flags"]))
    return "  ".join(_printable(p) for p in parts)


def _printable(text: str) -> str:
    # json.dumps escapes control characters (ESC, CR, newlines); strip its quotes.
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
