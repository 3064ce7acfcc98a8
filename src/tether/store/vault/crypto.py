"""The vault's cryptography: the master key file, key wrapping, and scrypt key derivation.

Invariant: plaintext (a secret value, a data key, a passphrase) never leaves this module in a form
that is written anywhere; what callers persist is always ``nonce || AES-GCM ciphertext``, sealed
with associated data that names what the blob is (item name and group, or group and expiry), so a
blob copied into another row fails authentication instead of decrypting as the wrong secret.

Key hierarchy:

    vault.key (32 random bytes, mode 0600) ── master key
        ├── wraps the data key of every plain group (group row, AAD ``group:<name>``)
        └── wraps the data key of an *unlocked* passphrase group (unlock row, AAD with expiry)
    scrypt(passphrase, per-group salt) ── key-encryption key of one passphrase group
        └── wraps that group's data key; a failed tag = wrong passphrase (the verifier)
    data key (32 random bytes per group) ── seals each value with a fresh 96-bit nonce
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from tether.errors import RefusedError, TetherError
from tether.home import open_regular

KEY_BYTES = 32
NONCE_BYTES = 12
SALT_BYTES = 16
_KEY_HEADER = "tether-vault-key-v1:"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScryptParams:
    """scrypt cost, stored with each passphrase group so a later default change keeps it readable."""

    n: int = 2**15  # 32 MiB of memory and ~0.1 s per derivation: cheap to unlock, costly to guess
    r: int = 8
    p: int = 1


class VaultKeyError(TetherError):
    """``vault.key`` is missing, damaged or too widely readable; the message says how to repair it."""

    code = "VAULT_KEY"


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or ``None`` when the key is wrong or the blob was altered or moved."""
    if len(blob) <= NONCE_BYTES:
        return None
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        return None


def derive_kek(passphrase: str, salt: bytes, params: ScryptParams) -> bytes:
    kdf = Scrypt(salt=salt, length=KEY_BYTES, n=params.n, r=params.r, p=params.p)
    return kdf.derive(passphrase.encode("utf-8"))


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def read_master_key(path: Path) -> bytes | None:
    """The master key, or ``None`` when the file does not exist yet."""
    try:
        # Never blocks (a FIFO in its place), and a directory or device is refused here too.
        fd = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise VaultKeyError(f"{path} cannot be opened: {exc.strerror}; it must be a regular file") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise VaultKeyError(
                f"{path} is accessible by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"run: chmod 600 {path}"
            )
        text = handle.read(256).decode("ascii", "replace").strip()
    if not text.startswith(_KEY_HEADER):
        raise VaultKeyError(f"{path} is not a tether vault key (bad header); restore it from a backup")
    try:
        key = base64.b64decode(text[len(_KEY_HEADER) :], validate=True)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise VaultKeyError(f"{path} is damaged (the key is not {KEY_BYTES} bytes); restore it from a backup")
    return key


def create_master_key(path: Path) -> bytes:
    """Create ``vault.key`` atomically, or return the key another process created first.

    The key is written to a private temporary file, fsynced, then ``link()``ed into place: link
    fails with EEXIST when a racing process won, and a reader never sees a half-written key.
    """
    key = new_key()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write((_KEY_HEADER + base64.b64encode(key).decode("ascii") + "\n").encode("ascii"))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            existing = read_master_key(path)
            if existing is None:  # removed between link and read: an operator is deleting it
                raise VaultKeyError(f"{path} vanished while being created; retry") from None
            return existing
    finally:
        tmp.unlink(missing_ok=True)
    return key


def wrong_passphrase(group: str) -> RefusedError:
    return RefusedError(f"wrong passphrase for vault group {group!r}; nothing was changed", code="REFUSED")
