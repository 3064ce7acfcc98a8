"""Identifiers of persistent shells and runs.

Invariant: a shell id is ``dsh-`` + 6 lowercase base-36 characters and is unique among the live
tmux sessions *and* the durable records of one ``TETHER_HOME`` (the caller checks both); a run id
is 8 hex characters shown to the model; a nonce is 12 base-36 characters that is never shown.
"""

from __future__ import annotations

import re
import secrets

from tether.errors import UsageError

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
SHELL_ID_RE = re.compile(r"^dsh-[0-9a-z]{6}$")
HUB_SESSION = "tether-hub"


def _b36(n: int) -> str:
    # 252 = 7 × 36: bytes below it map uniformly onto the 36 characters; the rest are redrawn.
    out: list[str] = []
    while len(out) < n:
        out.extend(_B36[b % 36] for b in secrets.token_bytes(2 * n) if b < 252)
    return "".join(out[:n])


def new_shell_id() -> str:
    return "dsh-" + _b36(6)


def new_run_id() -> str:
    return secrets.token_hex(4)


def new_nonce() -> str:
    return _b36(12)


def is_shell_id(value: str) -> bool:
    return SHELL_ID_RE.match(value) is not None


def check_shell_id(value: str) -> str:
    """``value`` if it is a shell id, else ``UsageError`` (safe to embed in a tmux target then)."""
    if not is_shell_id(value):
        shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}… ({len(value)} characters)"
        raise UsageError(f"shell id {shown} is not valid; shell ids look like dsh-ab12cd")
    return value
