"""``tether vault …``: a person manages secrets and unlocks passphrase groups.

The arguments are defined in ``tether.cli.commands.vault``.

Invariant: a secret value or passphrase never comes from the command line (where ``ps`` and shell
history would keep it): it is read with a no-echo prompt on a terminal, or from stdin when stdin
is not a terminal, and handed to the people-only ``vault`` tool for that one call. Each action is
audited once by the tools layer with source ``cli`` and actor ``cli`` — names, groups and
outcome only, never a value.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import UTC, datetime
from typing import Any

from tether.cli.door import DoorTools, call_tool, tools_session
from tether.errors import UsageError

# -- input --------------------------------------------------------------------------------------


def _interactive() -> bool:
    return sys.stdin.isatty()


def _prompt(prompt: str) -> str:
    try:
        return getpass.getpass(prompt)
    except EOFError:  # Ctrl-D at the prompt
        raise UsageError("no input given at the prompt; nothing was changed") from None


def _read_value(name: str) -> str:
    if _interactive():
        return _prompt(f"value for {name} (not echoed): ")
    data = sys.stdin.read()
    # One trailing newline is the end of `echo`/a heredoc, not part of the secret.
    return data.removesuffix("\n").removesuffix("\r")


def _read_passphrase(prompt: str) -> str:
    if _interactive():
        return _prompt(prompt)
    return sys.stdin.readline().removesuffix("\n").removesuffix("\r")


# -- actions ------------------------------------------------------------------------------------


def _vault(arguments: dict[str, Any]) -> dict[str, Any]:
    result = call_tool("vault", arguments)
    return {"text": result.text, **result.structured}


def set_secret(args: argparse.Namespace) -> int:
    with tools_session() as tools:
        value = _read_value(args.name)
        arguments: dict[str, Any] = {"action": "set", "name": args.name, "group": args.group, "value": value}
        if _interactive() and _locked(tools, args.group):
            arguments["passphrase"] = _read_passphrase(f"group {args.group!r} is locked; its passphrase: ")
        print(tools.call("vault", arguments).text)
    return 0


def _locked(tools: DoorTools, group: str) -> bool:
    """Whether ``group`` is a locked passphrase group (asked before prompting: not an action)."""
    listing = tools.call("vault", {"action": "list"}, audited=False).structured
    return any(g["name"] == group and g["protected"] and g["locked"] for g in listing.get("groups", []))


def remove_secret(args: argparse.Namespace) -> int:
    print(_vault({"action": "rm", "name": args.name})["text"])
    return 0


def lock_group(args: argparse.Namespace) -> int:
    print(_vault({"action": "lock", "group": args.group})["text"])
    return 0


def unlock_group(args: argparse.Namespace) -> int:
    if args.minutes is not None and args.minutes < 1:
        raise UsageError("--minutes must be at least 1")
    passphrase = _read_passphrase(f"passphrase for group {args.group!r}: ")
    arguments: dict[str, Any] = {"action": "unlock", "group": args.group, "passphrase": passphrase}
    if args.minutes is not None:
        arguments["minutes"] = args.minutes

    with tools_session() as tools:
        info = tools.call("vault", arguments).structured["group"]
        until = _clock_time(info.get("unlocked_until_ms") or 0)
        print(
            f"group {args.group} unlocked until {until} for every tether process using "
            f"{tools.home}; `tether vault lock {args.group}` ends it now"
        )
    return 0


def group_create(args: argparse.Namespace) -> int:
    passphrase: str | None = None
    if not args.no_passphrase:
        passphrase = _read_passphrase(f"new passphrase for group {args.group!r}: ")
        if _interactive() and _prompt("repeat it: ") != passphrase:
            raise UsageError("the two passphrases differ; nothing was created")
    arguments: dict[str, Any] = {"action": "group-create", "group": args.group}
    if passphrase is not None:
        arguments["passphrase"] = passphrase
    print(_vault(arguments)["text"])
    return 0


def group_rm(args: argparse.Namespace) -> int:
    print(_vault({"action": "group-rm", "group": args.group})["text"])
    return 0


def list_secrets(args: argparse.Namespace) -> int:
    listing = _vault({"action": "list"})
    if args.json:
        print(json.dumps(_listing_json(listing), indent=2))
    elif not listing["groups"]:
        print("the vault is empty; add a secret with `tether vault set NAME`")
    else:
        print(_listing_text(listing))
    return 0


def _clock_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _listing_json(listing: dict[str, Any]) -> dict[str, Any]:
    """The documented ``--json`` shape (snake_case, as ``tether vault list --json`` always printed)."""
    return {
        "groups": [
            {
                "name": g["name"],
                "protected": g["protected"],
                "locked": g["locked"],
                "unlocked_until_ms": g["unlockedUntilMs"],
                "items": g["items"],
            }
            for g in listing["groups"]
        ],
        "items": [
            {"name": i["name"], "group": i["group"], "locked": i["locked"], "updated_ms": i["updatedMs"]}
            for i in listing["items"]
        ],
    }


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _listing_text(listing: dict[str, Any]) -> str:
    groups: list[tuple[str, ...]] = [("GROUP", "KIND", "STATE", "SECRETS")]
    for g in listing["groups"]:
        if not g["protected"]:
            state = "open"
        elif g["locked"]:
            state = "locked"
        else:
            state = f"unlocked until {_clock_time(g['unlockedUntilMs'] or 0)}"
        groups.append((g["name"], "passphrase" if g["protected"] else "plain", state, str(g["items"])))
    items: list[tuple[str, ...]] = [("NAME", "GROUP", "STATE")]
    items.extend((i["name"], i["group"], "locked" if i["locked"] else "available") for i in listing["items"])
    text = _table(groups)
    if listing["items"]:
        text += "\n\n" + _table(items)
    return text
