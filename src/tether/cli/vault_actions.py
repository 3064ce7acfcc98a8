"""``tether vault …``: a person manages secrets and unlocks passphrase groups.

Invariant: a secret value or passphrase never comes from the command line (where ``ps`` and shell
history would keep it): it is read with a no-echo prompt on a terminal, or from stdin when stdin
is not a terminal. Each action is audited with source ``cli`` and actor ``cli`` — names, groups
and outcome only, never a value.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from tether.audit.log import AuditLog
from tether.audit.record import Outcome
from tether.config import load_config
from tether.errors import RefusedError, TetherError, UsageError
from tether.store.vault import Vault, VaultListing, VaultLockedError

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


# -- audit --------------------------------------------------------------------------------------


def _audited(vault: Vault, action: str, targets: list[str], run: Callable[[], int]) -> int:
    """Run ``run()``; log one ``cli`` record whatever happens (names only), then re-raise.

    The store is closed on the way out, so an in-process caller (tests) leaks no connection.
    """
    outcome: Outcome = "error"
    detail = ""
    try:
        result = run()
        outcome = "ok"
        return result
    except RefusedError as exc:
        outcome, detail = "refused", exc.message
        raise
    except TetherError as exc:
        detail = exc.message
        raise
    except KeyboardInterrupt:
        outcome, detail = "cancelled", "interrupted at the prompt"
        raise
    finally:
        try:
            AuditLog(vault.store.path.parent).append(
                actor="cli",
                source="cli",
                tool="vault",
                action=action,
                targets=targets,
                outcome=outcome,
                detail=detail,
            )
        finally:
            vault.store.close()


def _vault() -> Vault:
    return Vault.open(load_config())


# -- actions ------------------------------------------------------------------------------------


def set_secret(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        value = _read_value(args.name)
        try:
            info = vault.set(args.name, value, group=args.group)
        except VaultLockedError:
            if not _interactive():
                raise
            passphrase = _read_passphrase(f"group {args.group!r} is locked; its passphrase: ")
            info = vault.set(args.name, value, group=args.group, passphrase=passphrase)
        print(f"stored {info.name} in group {info.group}; use it as {{{{vault.{info.name}}}}}")
        return 0

    return _audited(vault, "set", [args.name, args.group], run)


def remove_secret(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        group = vault.remove(args.name)
        print(f"removed {args.name} from group {group}")
        return 0

    return _audited(vault, "rm", [args.name], run)


def lock_group(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        was_unlocked = vault.lock(args.group)
        print(f"group {args.group} locked" + ("" if was_unlocked else " (it was not unlocked)"))
        return 0

    return _audited(vault, "lock", [args.group], run)


def unlock_group(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        if args.minutes is not None and args.minutes < 1:
            raise UsageError("--minutes must be at least 1")
        passphrase = _read_passphrase(f"passphrase for group {args.group!r}: ")
        info = vault.unlock(args.group, passphrase, args.minutes)
        until = _clock_time(info.unlocked_until_ms or 0)
        print(
            f"group {args.group} unlocked until {until} for every tether process using "
            f"{vault.store.path.parent}; `tether vault lock {args.group}` ends it now"
        )
        return 0

    return _audited(vault, "unlock", [args.group], run)


def group_create(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        passphrase: str | None = None
        if not args.no_passphrase:
            passphrase = _read_passphrase(f"new passphrase for group {args.group!r}: ")
            if _interactive() and _prompt("repeat it: ") != passphrase:
                raise UsageError("the two passphrases differ; nothing was created")
        info = vault.create_group(args.group, passphrase)
        kind = (
            "passphrase group (locked; `tether vault unlock` opens it)" if info.protected else "plain group"
        )
        print(f"created {kind} {info.name}")
        return 0

    return _audited(vault, "group-create", [args.group], run)


def group_rm(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        vault.delete_group(args.group)
        print(f"deleted group {args.group}")
        return 0

    return _audited(vault, "group-rm", [args.group], run)


def list_secrets(args: argparse.Namespace) -> int:
    vault = _vault()

    def run() -> int:
        listing = vault.list()
        if args.json:
            print(json.dumps(_listing_json(listing), indent=2))
        elif not listing.groups:
            print("the vault is empty; add a secret with `tether vault set NAME`")
        else:
            print(_listing_text(listing))
        return 0

    return _audited(vault, "list", [], run)


def _clock_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _listing_json(listing: VaultListing) -> dict[str, Any]:
    return {"groups": [asdict(g) for g in listing.groups], "items": [asdict(i) for i in listing.items]}


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _listing_text(listing: VaultListing) -> str:
    groups: list[tuple[str, ...]] = [("GROUP", "KIND", "STATE", "SECRETS")]
    for g in listing.groups:
        if not g.protected:
            state = "open"
        elif g.locked:
            state = "locked"
        else:
            state = f"unlocked until {_clock_time(g.unlocked_until_ms or 0)}"
        groups.append((g.name, "passphrase" if g.protected else "plain", state, str(g.items)))
    items: list[tuple[str, ...]] = [("NAME", "GROUP", "STATE")]
    items.extend((i.name, i.group, "locked" if i.locked else "available") for i in listing.items)
    text = _table(groups)
    if listing.items:
        text += "\n\n" + _table(items)
    return text
