"""Identifiers of persistent shells and runs.

Invariant: a shell id is ``dsh-`` + 6 lowercase base-36 characters and is unique among the live
tmux sessions *and* the durable records of one ``TETHER_HOME`` (the caller checks both); a run id
is 8 hex characters shown to the model; a nonce is 12 base-36 characters that is never shown.
"""

from __future__ import annotations

import re
import secrets

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
SHELL_ID_RE = re.compile(r"^dsh-[0-9a-z]{6}$")
HUB_SESSION = "tether-hub"


def _b36(n: int) -> str:
    return "".join(secrets.choice(_B36) for _ in range(n))


def new_shell_id() -> str:
    return "dsh-" + _b36(6)


def new_run_id() -> str:
    return secrets.token_hex(4)


def new_nonce() -> str:
    return _b36(12)


def is_shell_id(value: str) -> bool:
    return SHELL_ID_RE.match(value) is not None
