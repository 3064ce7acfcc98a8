"""``tether shell …`` (its actions): a person lists persistent shells, locks or unlocks them by
hand, reads a shell's command timeline and exports its recording.

Invariant: every action is one call of a people-only tool as ``cli`` (``tether.cli.door``): a manual
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.cli.door import call_tool
from tether.errors import STORAGE_ERRNOS, StorageError, UsageError


def lock_shell(args: argparse.Namespace) -> int:
    who = args.who if args.who is not None else getpass.getuser()
    result = call_tool(
        "shell_lock", {"shell": args.shell, "action": "lock", "who": who, "reason": args.reason}
    )
    print(_printable(result.text))
    return 0


def unlock_shell(args: argparse.Namespace) -> int:
    print(_printable(call_tool("shell_lock", {"shell": args.shell, "action": "unlock"}).text))
    return 0


def list_shells(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = call_tool("shell_records", {}).structured.get("shells", [])
    if args.json:
        json.dump({"shells": rows}, sys.stdout, indent=2)
        print()
        return 0
    if not rows:
        print("no shells recorded; agents open them with shell_open")
        return 0
    table = [("ID", "OWNER", "LABEL", "LOCK", "STARTED IN")]
    for r in rows:
        lock = (
            f"locked by {r['lockedBy']}"
            if r["lockedBy"]
            else ("writing: " + r["writer"] if r["writer"] else "-")
        )
        table.append((r["id"], r["owner"], r["label"], lock, r["cwd"]))
    _print_table(table)
    return 0


def timeline(args: argparse.Namespace) -> int:
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
    table = [("STARTED", "TOOK", "EXIT", "BY", "COMMAND")]
    for c in commands:
        started = utc_text(c["startedMs"]) if c["startedMs"] is not None else "?"
        took = _duration(c["durationMs"])
        code = "running" if c["endedMs"] is None else str(c["exitCode"])
        who = c["by"] + (f" ({c['client']})" if c.get("client") else "")
        table.append((started, took, code, who, c["text"]))
    _print_table(table, right=(1, 2))
    return 0


def record(args: argparse.Namespace) -> int:
    result = call_tool("shell_record", {"shell": args.shell})
    cast = str(result.structured.get("cast", ""))
    if args.output:
        try:
            Path(args.output).write_text(cast, encoding="utf-8")
        except OSError as exc:
            full = exc.errno in STORAGE_ERRNOS
            raise (StorageError if full else UsageError)(
                f"-o {args.output}: the recording cannot be written there ({exc.strerror}); "
                + (
                    "free space there, or give another path"
                    if full
                    else "give a file path in a directory you can write"
                )
            ) from exc
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


def _print_table(rows: Sequence[Sequence[str]], *, right: tuple[int, ...] = ()) -> None:
    """Columns as wide as their widest cell, the last one unpadded. Every cell is made printable
    first: a label, a working directory or a client's name is an agent's text, and its escape
    sequences must not reach a person's terminal (retitle it, clear it, write its clipboard)."""
    cells = [[_printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]) - 1)]
    for row in cells:
        padded = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        print("  ".join([*padded, row[-1]]))
