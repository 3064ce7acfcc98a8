"""The bearer token of ``tether serve``.

Invariant: ``$TETHER_HOME/token`` is created once, atomically, with mode 0600 and 256 random bits;
later starts reuse it, so configured clients keep working. A token file readable by others is
refused rather than trusted.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from tether.errors import UsageError


def load_or_create_token(home: Path) -> str:
    path = home / "token"
    if not path.exists():
        value = secrets.token_urlsafe(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another tether process created it first; read theirs below
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(value + "\n")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise UsageError(f"{path} is readable by other users (mode {mode:o}); run: chmod 600 {path}")
    value = path.read_text(encoding="utf-8").strip()
    if len(value) < 16:
        raise UsageError(f"{path} holds a token shorter than 16 characters; delete it to create a new one")
    return value


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant-time compare)."""
    if not authorization:
        return False
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())
