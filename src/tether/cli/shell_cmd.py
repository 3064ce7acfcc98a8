"""``tether shell …``: a person lists persistent shells, locks or unlocks them by hand, reads a
shell's command timeline and exports its recording.

Invariant: every action is one call of a people-only tool as ``cli`` (``tools_door``): a manual
lock set here is the same one the panel sets — while it holds, every agent write to the shell is
refused at once, in every tether process sharing the home — and each action (``list``, ``lock``,
``unlock``, ``timeline``, ``record``) is audited once with actor and source ``cli``, whatever its
outcome. A recording never holds a vault value (the tool masks it).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

from tether.cli.tools_door import call_tool
from tether.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "shell",
        help="list persistent shells; lock or unlock them by hand; timelines and recordings",
        description="Persistent shells (tmux) of this TETHER_HOME. A shell you lock refuses every agent "
        "write at once until you unlock it (here or in the panel).",
    )
    sub = parser.add_subparsers(dest="shell_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", help="the recorded shells with owner, label, cwd and lock state")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_list)

    p = sub.add_parser("lock", help="lock a shell: agent writes are refused until you unlock it")
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("--reason", default="", help="why (shown to agents that are refused)")
    p.add_argument("--who", default=None, help="who holds the lock (default: your login name)")
    p.set_defaults(func=_lock)

    p = sub.add_parser("unlock", help="remove a manual lock")
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.set_defaults(func=_unlock)

    p = sub.add_parser(
        "timeline", help="the commands a shell ran: start, duration, exit code, who (agent or person)"
    )
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("--limit", type=int, default=200, help="the newest N commands (default 200)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_timeline)

    p = sub.add_parser(
        "record",
        help="the shell's output with timing as an asciicast v2 recording (vault values masked)",
        description="Write the shell's whole retained output, with the time each part was printed, as an "
        "asciicast v2 file (play it with `asciinema play`, or in the panel). Vault values are masked.",
    )
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: standard output)")
    p.set_defaults(func=_record)


def _lock(args: argparse.Namespace) -> int:
    who = args.who if args.who is not None else getpass.getuser()
    result = call_tool(
        "shell_lock", {"shell": args.shell, "action": "lock", "who": who, "reason": args.reason}
    )
    print(result.text)
    return 0


def _unlock(args: argparse.Namespace) -> int:
    print(call_tool("shell_lock", {"shell": args.shell, "action": "unlock"}).text)
    return 0


def _list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = call_tool("shell_records", {}).structured.get("shells", [])
    if args.json:
        json.dump({"shells": rows}, sys.stdout, indent=2)
        print()
        return 0
    if not rows:
        print("no shells recorded; agents open them with shell_open")
        return 0
    print(f"{'ID':<11} {'OWNER':<20} {'LABEL':<16} {'LOCK':<24} CWD")
    for r in rows:
        lock = (
            f"locked by {r['lockedBy']}"
            if r["lockedBy"]
            else ("writing: " + r["writer"] if r["writer"] else "-")
        )
        print(f"{r['id']:<11} {r['owner'][:20]:<20} {r['label'][:16]:<16} {lock[:24]:<24} {r['cwd']}")
    return 0


def _timeline(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    result = call_tool("shell_timeline", {"shell": args.shell, "limit": args.limit})
    commands: list[dict[str, Any]] = result.structured.get("commands", [])
    if args.json:
        json.dump({"shell": args.shell, "commands": commands}, sys.stdout, indent=2)
        print()
        return 0
    if not commands:
        print(f"{args.shell} has run no command yet")
        return 0
    print(f"{'STARTED':<23} {'TOOK':>9} {'EXIT':>7}  {'BY':<28} COMMAND")
    for c in commands:
        started = utc_text(c["startedMs"]) if c["startedMs"] is not None else "?"
        took = _duration(c["durationMs"])
        code = "running" if c["endedMs"] is None else str(c["exitCode"])
        who = c["by"] + (f" ({c['client']})" if c.get("client") else "")
        print(f"{started:<23} {took:>9} {code:>7}  {who[:28]:<28} {_printable(c['text'])}")
    return 0


def _record(args: argparse.Namespace) -> int:
    result = call_tool("shell_record", {"shell": args.shell})
    cast = str(result.structured.get("cast", ""))
    if args.output:
        Path(args.output).write_text(cast, encoding="utf-8")
        print(f"{args.output}: {result.text.split(' (', 1)[0]}", file=sys.stderr)
    else:
        sys.stdout.write(cast)
    return 0


def utc_text(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms // 60_000}m{(ms // 1000) % 60:02d}s"


def _printable(text: str) -> str:
    # json.dumps escapes control characters (ESC, CR, newlines); strip its quotes.
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
