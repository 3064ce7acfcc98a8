"""``tether panel …``: its arguments (``tether.cli.actions.panel`` runs them).

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

from typing import Any, Final

from tether.cli.lazy import handler

_ACTIONS: Final = "tether.cli.actions.panel"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "panel",
        help="give each person panel access of their own, list it, revoke it",
        description="Each person who uses the web panel can have access of their own: a token that "
        "signs them in by name, so the audit log, the approvals and the locks say who acted. The "
        "serve token ($TETHER_HOME/token) still signs in as 'person at the panel'.",
    )
    sub = parser.add_subparsers(dest="panel_command", metavar="ACTION", required=True)

    p = sub.add_parser("add", help="give NAME access: prints their sign-in token, once")
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--url",
        default=None,
        help="the panel's address (e.g. http://127.0.0.1:8765): also print their sign-in link",
    )
    p.set_defaults(func=handler(_ACTIONS, "add"))

    p = sub.add_parser("list", help="who has panel access, who had it (never a token)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=handler(_ACTIONS, "list_people"))

    p = sub.add_parser("revoke", help="end NAME's access at once: their open pages lose it")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=handler(_ACTIONS, "revoke"))
