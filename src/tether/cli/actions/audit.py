"""``tether audit``: prove the audit log intact (``verify``) and read it (``show``).

The arguments are defined in ``tether.cli.commands.audit``.

Invariant: both subcommands only read the log, through the people-only tools ``audit_verify`` and
``audit_show`` (as ``cli``) — verifying or viewing it is not itself an audited action, and never
repairs or rewrites it. ``verify`` exits 0 when the chain holds and 1 at the
first broken record, which it prints (with ``--json``, as an object holding its stable ``code``);
bad flags exit 2 (argparse, or a ``UsageError``).
Everything printed from a record is escaped, so a logged command cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from tether.cli.door import call_tool
from tether.errors import UsageError
from tether.home import resolve_home

# A log this large takes a person noticeable time to verify (every record is read and hashed: 43 MB,
# 100,000 calls, took 11–23 s on a busy two-core machine): the command says so before it starts.
SLOW_BYTES = 16 * 1024 * 1024


def _log_size(home: Path) -> tuple[int, int]:
    """How many day files (``*.jsonl``) the audit log has and their bytes: what verify reads. Read
    here, as this command imports nothing of the audit package (it runs in the tools process)."""
    files = size = 0
    with contextlib.suppress(OSError), os.scandir(home / "audit") as entries:
        for entry in entries:
            if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False):
                files += 1
                with contextlib.suppress(OSError):
                    size += entry.stat(follow_symlinks=False).st_size
    return files, size


def verify_log(args: argparse.Namespace) -> int:
    text = args.key
    if args.key_file:
        try:
            text = Path(args.key_file).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--key-file {args.key_file}: cannot read it ({exc})") from exc
    if text is not None and not text.strip():
        # `--key "$KEY"` with KEY unset, or an empty file, asked for the seals' proof: verifying
        # without it would say "intact" and exit 0 as if the seals had been proven.
        where = f"--key-file {args.key_file} is empty" if args.key_file else "--key is empty"
        raise UsageError(
            f"{where}; give the verification key printed by `tether audit setup-keys`, or leave "
            "the flag out to check the hash chain without the seals"
        )
    files, size = _log_size(resolve_home())
    if size >= SLOW_BYTES:  # every record is read and hashed: say so before the wait, not after
        print(
            f"tether audit verify: reading {size / 2**20:,.0f} MiB of audit log in {files} day files; "
            "this takes a while",
            file=sys.stderr,
            flush=True,
        )
    result = call_tool("audit_verify", {"key": text.strip()} if text else {})
    found = result.structured
    if args.json:
        print(json.dumps({"ok": found["ok"], "records": found["records"], "break": found["break"]}))
    else:
        print(found["summary"])
    return 0 if found["ok"] else 1


def setup_keys(args: argparse.Namespace) -> int:
    if args.every < 1:
        raise UsageError(f"--every must be a whole number of records, at least 1 (got {args.every})")
    key = call_tool("audit_setup_keys", {"every": args.every}).structured
    print(
        "forward-secure sealing is on: every "
        f"{key['every']}th record is a seal, the first at seq {key['firstSeq']}.\n"
        "Verification key (shown once; store it OFF this machine, e.g. in a password manager):\n\n"
        f"    {key['key']}\n\n"
        "Prove the log later with: tether audit verify --key KEY"
    )
    return 0


def show(args: argparse.Namespace) -> int:
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
    """One line per record: time, seq, who (and its client), what, where, outcome (a cancelled
    call's cause in brackets), then command/reason/flags."""
    who = f"{record['source']}:{record['actor']}"
    if record.get("client"):
        who += f" ({record['client']})"
    parts = [record["time"], f"#{record['seq']}", who, f"{record['tool']} {record['action']}"]
    if record["targets"]:
        parts.append(",".join(record["targets"]))
    outcome = record["outcome"]
    extra = record.get("extra") or {}
    if isinstance(extra.get("cause"), str):
        outcome += f" [{extra['cause']}]"  # why a cancelled call ended (tether.tools.ending)
    parts.append(outcome + (f" ({record['detail']})" if record["detail"] else ""))
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
