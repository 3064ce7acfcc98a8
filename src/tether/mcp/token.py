"""The bearer token of ``tether serve``.

Invariant: ``$TETHER_HOME/token`` is created once, atomically, with mode 0600 and 256 random bits;
later starts reuse it, so configured clients keep working. A token file readable by others is
refused rather than trusted, and so is one that is not a regular file of text (a directory, a
FIFO — whose read would block the start for ever —, bytes that are not UTF-8) or holds what a
client cannot send in a header (a space, a control character, non-ASCII text): each is one
``UsageError`` naming the file and the fix, never a traceback or a hang.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from tether.errors import STORAGE_ERRNOS, StorageError, UsageError


def load_or_create_token(home: Path) -> str:
    path = home / "token"
    if not path.exists():
        _create(path, secrets.token_urlsafe(32))
    value = _read_token(path)
    if len(value) < 16:
        raise UsageError(f"{path} holds a token shorter than 16 characters; delete it to create a new one")
    if not (value.isascii() and value.isprintable()) or any(c.isspace() for c in value):
        # A client sends it in an Authorization header, and the banner prints it to a terminal.
        raise UsageError(
            f"{path} holds a token with a space, a control character or non-ASCII text in it, which "
            f"no client can send as 'Authorization: Bearer <token>'; {_recreate(path)}"
        )
    return value


def _create(path: Path, value: str) -> None:
    """Write the token beside ``path`` and link it into place only once whole: a write the disk
    refused (a full disk) left an empty ``token``, which every later start refused as too short
    until a person deleted it. Another tether process that created it first keeps its own."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(f"{value}\n".encode("ascii"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another tether process created it first
            os.link(tmp, path)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise StorageError(
            f"{path} could not be written ({exc.strerror}); free space there, or make it writable, "
            "and start tether serve again"
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _recreate(path: Path) -> str:
    return f"delete it (rm -r {path}) and tether serve creates a new token"


def _read_token(path: Path) -> str:
    recreate = _recreate(path)
    try:
        # Non-blocking: opening a FIFO to read would wait for a writer that never comes.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"{path} cannot be read ({exc.strerror}); {recreate}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path} is not a regular file; {recreate}")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise UsageError(f"{path} is readable by other users (mode {mode:o}); run: chmod 600 {path}")
        try:
            return os.read(fd, 4096).decode("utf-8").strip()
        except UnicodeDecodeError:
            raise UsageError(f"{path} does not hold a token (it is not UTF-8 text); {recreate}") from None
        except OSError as exc:
            raise UsageError(f"{path} cannot be read ({exc.strerror}); {recreate}") from exc
    finally:
        os.close(fd)


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant-time compare)."""
    if not authorization:
        return False
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())
