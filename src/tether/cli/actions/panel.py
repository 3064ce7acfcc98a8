"""``tether panel …``: a person gives, lists and revokes the panel access of each person.

The arguments are defined in ``tether.cli.commands.panel``.

Invariant: every action is one call of the people-only ``panel_people`` tool in the home's tools
process (audited there as actor ``cli``, naming the person, never the token). The token ``add``
makes is printed to stdout once — tether keeps only its hash, so it cannot be shown again.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from tether.cli.door import call_tool


def _when(ms: Any) -> str:
    if not isinstance(ms, int):
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def add(args: argparse.Namespace) -> int:
    result = call_tool("panel_people", {"action": "add", "name": args.name})
    token = str(result.structured["token"])
    name = result.structured["person"]["name"]
    print(f"{result.text}.")
    print(f"token: {token}")
    if args.url:
        link = f"{args.url.rstrip('/')}/panel/login?token={quote(token, safe='')}"
        print(f"sign-in link (send it to {name} privately; it signs them in once opened): {link}")
    else:
        print(f"{name} opens the panel's /panel/login page and pastes it (or use --url for a link).")
    return 0


def list_people(args: argparse.Namespace) -> int:
    result = call_tool("panel_people", {"action": "list"})
    people = result.structured.get("people", [])
    if args.json:
        print(json.dumps(people, indent=2))
        return 0
    if not people:
        print("nobody has panel access of their own (the serve token signs in as 'person at the panel')")
        return 0
    print(f"{'NAME':<24} {'SINCE':<24} REVOKED")
    for p in people:
        print(f"{p['name']:<24} {_when(p['createdMs']):<24} {_when(p['revokedMs'])}")
    return 0


def revoke(args: argparse.Namespace) -> int:
    result = call_tool("panel_people", {"action": "revoke", "name": args.name})
    print(result.text)
    return 0
