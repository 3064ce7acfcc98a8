"""``tether shell …``: its arguments (``tether.cli.actions.shell`` runs them).

Invariant: this module imports nothing beyond the standard library; see ``tether.cli.lazy``.
"""

from __future__ import annotations

from typing import Any, Final

from tether.cli.lazy import handler

_ACTIONS: Final = "tether.cli.actions.shell"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "shell",
        help="list persistent shells; lock or unlock them by hand; timelines and recordings",
        description="Persistent shells (tmux) of this TETHER_HOME. A shell you lock refuses every agent "
        "write at once until you unlock it (here or in the panel).",
    )
    sub = parser.add_subparsers(dest="shell_command", metavar="ACTION", required=True)

    p = sub.add_parser(
        "list", help="the recorded shells with owner, label, lock state and the directory each started in"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=handler(_ACTIONS, "list_shells"))

    p = sub.add_parser("lock", help="lock a shell: agent writes are refused until you unlock it")
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("--reason", default="", help="why (shown to agents that are refused)")
    p.add_argument("--who", default=None, help="who holds the lock (default: your login name)")
    p.set_defaults(func=handler(_ACTIONS, "lock_shell"))

    p = sub.add_parser("unlock", help="remove a manual lock")
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.set_defaults(func=handler(_ACTIONS, "unlock_shell"))

    p = sub.add_parser(
        "timeline", help="the commands a shell ran: start, duration, exit code, who (agent or person)"
    )
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("--limit", type=int, default=200, help="the newest N commands (default 200)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=handler(_ACTIONS, "timeline"))

    p = sub.add_parser(
        "record",
        help="the shell's output with timing as an asciicast v2 recording (vault values masked)",
        description="Write the shell's whole retained output, with the time each part was printed, as an "
        "asciicast v2 file (play it with `asciinema play`, or in the panel). Vault values are masked.",
    )
    p.add_argument("shell", metavar="ID", help="the shell id, e.g. dsh-ab12cd")
    p.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: standard output)")
    p.set_defaults(func=handler(_ACTIONS, "record"))
