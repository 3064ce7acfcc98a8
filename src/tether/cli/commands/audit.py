"""``tether audit``: the arguments of ``verify``, ``setup-keys`` and ``show``.

``tether.cli.actions.audit`` runs them.

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

from typing import Any, Final

from tether.cli.lazy import handler

_ACTIONS: Final = "tether.cli.actions.audit"
# ``tether.audit.SOURCES`` and ``tether.audit.DEFAULT_EVERY`` (a test keeps them equal): importing
# the audit package here would cost every ``tether --help``.
SOURCES: Final = ("tool", "panel", "host", "cli")
DEFAULT_EVERY: Final = 32


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
    key = check.add_mutually_exclusive_group()  # one key: silently preferring one hid the other
    key.add_argument(
        "--key",
        metavar="KEY",
        help="the verification key printed by setup-keys: also prove every forward-secure seal",
    )
    key.add_argument("--key-file", metavar="PATH", help="read the verification key from this file")
    check.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: ok, records, and the first break's file, line, seq, code and problem",
    )
    check.set_defaults(func=handler(_ACTIONS, "verify_log"))

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
    keys.set_defaults(func=handler(_ACTIONS, "setup_keys"))

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
    show.set_defaults(func=handler(_ACTIONS, "show"))
