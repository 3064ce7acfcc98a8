"""``tether shell …``: a person lists persistent shells and locks or unlocks them by hand.

Invariant: a manual lock set here is the same row the panel sets (``store.manual_locks``): while
it exists, every agent write to the shell is refused at once, in every tether process sharing the
home. Each action — ``lock``, ``unlock`` and ``list`` — is audited with actor and source ``cli``,
whatever its outcome.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from typing import Any

from tether.audit.log import AuditLog
from tether.audit.record import Outcome
from tether.config import load_config
from tether.errors import NotFoundError, RefusedError, TetherError
from tether.shells import Records, ShellRecord
from tether.store.db import Store
from tether.store.locks import ShellLocks
from tether.store.manual_locks import check_shell_id, utc_text


def _audited(
    store: Store, action: str, targets: list[str], run: Callable[[], int], reason: str | None = None
) -> int:
    outcome: Outcome = "error"
    detail = ""
    try:
        status = run()
        outcome = "ok"
        return status
    except RefusedError as exc:
        outcome, detail = "refused", exc.message
        raise
    except TetherError as exc:
        detail = exc.message
        raise
    finally:
        try:
            AuditLog(store.path.parent).append(
                actor="cli",
                source="cli",
                tool="shell",
                action=action,
                targets=targets,
                outcome=outcome,
                detail=detail,
                reason=reason or None,
            )
        finally:
            store.close()


def _open() -> tuple[Store, ShellLocks]:
    config = load_config()
    store = Store.open(config.home)
    return store, ShellLocks(config.home, store)


def _known(store: Store, shell_id: str) -> None:
    check_shell_id(shell_id)
    if shell_id not in Records(store).known_ids():
        raise NotFoundError(
            f"no shell {shell_id} is recorded in this TETHER_HOME; `tether shell list` shows them"
        )


def lock_shell(args: argparse.Namespace) -> int:
    store, locks = _open()

    def run() -> int:
        _known(store, args.shell)
        who = args.who if args.who is not None else getpass.getuser()
        lock, created = locks.manual.lock(args.shell, who=who, why=args.reason, source="cli")
        since = utc_text(lock.since_ms)
        if created:
            print(
                f"{lock.shell_id} locked by {lock.who} since {since}; agents are refused until `tether shell "
                f"unlock {lock.shell_id}`"
            )
        else:
            why = f" ({lock.why})" if lock.why else ""
            print(f"{lock.shell_id} was already locked by {lock.who} since {since}{why}; nothing changed")
        return 0

    return _audited(store, "lock", [args.shell], run, reason=args.reason)


def unlock_shell(args: argparse.Namespace) -> int:
    store, locks = _open()

    def run() -> int:
        check_shell_id(args.shell)
        lock = locks.manual.unlock(args.shell)
        if lock is None:
            print(f"{args.shell} was not locked; nothing changed")
        else:
            print(f"{args.shell} unlocked (it was locked by {lock.who} since {utc_text(lock.since_ms)})")
        return 0

    return _audited(store, "unlock", [args.shell], run)


def _row(rec: ShellRecord, locks: ShellLocks) -> dict[str, Any]:
    state = locks.lock_state(rec.id)
    return {
        "id": rec.id,
        "owner": rec.owner,
        "label": rec.label,
        "cwd": rec.cwd,
        "createdMs": rec.created_ms,
        "lastActivityMs": rec.last_activity_ms,
        "idleMinutes": rec.idle_minutes,
        "lockedBy": state.manual.who if state.manual else None,
        "lockedSinceMs": state.manual.since_ms if state.manual else None,
        "lockReason": state.manual.why if state.manual else None,
        "writer": state.holder.actor if state.holder else None,
    }


def list_shells(args: argparse.Namespace) -> int:
    store, locks = _open()

    def run() -> int:
        rows = [
            _row(rec, locks) for rec in sorted(Records(store).shells().values(), key=lambda r: r.created_ms)
        ]
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

    return _audited(store, "list", [], run)
