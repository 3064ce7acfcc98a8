"""``tether vault …``: its arguments (``tether.cli.actions.vault`` runs them).

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

from typing import Any, Final

from tether.cli.lazy import handler

_ACTIONS: Final = "tether.cli.actions.vault"
# ``tether.store.vault.DEFAULT_GROUP`` (a test keeps the two equal).
DEFAULT_GROUP: Final = "default"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "vault",
        help="manage vault secrets ({{vault.NAME}} in shell commands)",
        description="Secrets referenced as {{vault.NAME}} in shell_run / shell_send. Values are read "
        "from a no-echo prompt, or from stdin when it is not a terminal — never from an argument.",
    )
    sub = parser.add_subparsers(dest="vault_command", metavar="ACTION", required=True)

    p = sub.add_parser("set", help="store or replace a secret (value from a prompt or stdin)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--group", default=DEFAULT_GROUP, help=f"group to store it in (default: {DEFAULT_GROUP})")
    p.set_defaults(func=handler(_ACTIONS, "set_secret"))

    p = sub.add_parser("list", help="names, groups and lock state (never values)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=handler(_ACTIONS, "list_secrets"))

    p = sub.add_parser("rm", help="delete a secret")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=handler(_ACTIONS, "remove_secret"))

    p = sub.add_parser("lock", help="lock a passphrase group now, in every tether process")
    p.add_argument("group", metavar="GROUP")
    p.set_defaults(func=handler(_ACTIONS, "lock_group"))

    p = sub.add_parser("unlock", help="unlock a passphrase group for a limited time (asks the passphrase)")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--minutes", type=int, default=None, help="how long (default: [vault].unlock_minutes)")
    p.set_defaults(func=handler(_ACTIONS, "unlock_group"))

    group = sub.add_parser("group", help="create or delete groups")
    gsub = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    p = gsub.add_parser("create", help="create a group; asks for its passphrase twice")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--no-passphrase", action="store_true", help="a plain group, always unlocked")
    p.set_defaults(func=handler(_ACTIONS, "group_create"))
    p = gsub.add_parser("rm", help="delete an empty group")
    p.add_argument("group", metavar="GROUP")
    p.set_defaults(func=handler(_ACTIONS, "group_rm"))
