"""Forward-secure seals over the audit chain: rewriting history needs a key the writer forgot.

Invariant: once ``setup_keys`` has run, the record at every seq that is a multiple of ``every``
is a *seal*: a ``host``/``audit``/``seal`` record whose ``extra.mac`` is
``HMAC-SHA256(K_i, "<prev>|<seq>")`` for index ``i = seq / every``. ``prev`` is the hash of the
record before it, which covers every earlier record through the chain. The writer keeps only
``K_n`` for the next index (``audit/seal.key``) and moves it forward with a one-way step,
``K_{i+1} = SHA-256("tether-audit-seal" || K_i)``, as it seals — so it can never recompute a seal
it has already written. The verifier starts from the *verification key* ``K_f`` (printed once at
setup and kept elsewhere), derives every later key, and checks every seal.

The threat model, as journald's forward-secure sealing (which this follows): an attacker with the
user's rights who edits a record and recomputes every later hash keeps the chain consistent, but
breaks the first seal after the edit, whose key it cannot derive from the one on disk. What stays
possible: rewriting the records after the newest seal (at most ``every - 1``), removing the newest
records (truncation), and — with the verification key, if it is stored on the same machine —
anything. Positions are fixed (multiples of ``every``), so removing a seal or shifting records
leaves a required position without a valid seal.

Crash safety: a seal is written first, then the next key is persisted (temporary file, fsync,
rename). A writer that dies in between leaves ``K_i`` for an index already sealed; the next seal
steps it forward to its own index, so no index is ever sealed twice with different contents.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from tether.errors import UsageError
from tether.home import replace_file

KEY_NAME = "seal.key"
DEFAULT_EVERY = 32
_RATCHET = b"tether-audit-seal"
_PREFIX = "tak1"


@dataclass(frozen=True, slots=True, kw_only=True)
class SealKey:
    """A key for seal index ``index`` (the writer's state, or the verifier's starting point)."""

    every: int
    index: int
    key: bytes

    def at(self, index: int) -> SealKey:
        """The key for a later index (one-way: an earlier index cannot be reached)."""
        if index < self.index:
            raise ValueError(f"seal key {self.index} cannot derive the earlier key {index}")
        key = self.key
        for _ in range(index - self.index):
            key = hashlib.sha256(_RATCHET + key).digest()
        return SealKey(every=self.every, index=index, key=key)

    def mac(self, prev: str, seq: int) -> str:
        return hmac.new(self.key, f"{prev}|{seq}".encode("ascii"), hashlib.sha256).hexdigest()

    def text(self) -> str:
        """The verification-key form: ``tak1-EVERY-INDEX-HEX``."""
        return f"{_PREFIX}-{self.every}-{self.index}-{self.key.hex()}"


def parse_verification_key(text: str) -> SealKey:
    parts = text.strip().split("-")
    try:
        if len(parts) != 4 or parts[0] != _PREFIX:
            raise ValueError
        every, index, key = int(parts[1]), int(parts[2]), bytes.fromhex(parts[3])
        if every < 2 or index < 1 or len(key) != 32:
            raise ValueError
    except ValueError:
        raise UsageError(
            "the verification key is not of the form tak1-EVERY-INDEX-HEX (64 hex digits), as "
            "printed by `tether audit setup-keys`; give it exactly"
        ) from None
    return SealKey(every=every, index=index, key=key)


def read_writer_key(audit_dir: Path) -> SealKey | None:
    """The writer's current key, or None when sealing is not set up."""
    try:
        data = json.loads((audit_dir / KEY_NAME).read_text(encoding="ascii"))
        key = SealKey(every=int(data["every"]), index=int(data["index"]), key=bytes.fromhex(data["key"]))
        # Setup never writes a key outside these, so such a file was edited; sealing with it would
        # fail mid-batch (a zero ``every``) or write seals no verification key proves.
        if key.every < 2 or key.index < 1 or len(key.key) != 32:
            raise ValueError(
                f"it holds every {key.every}, index {key.index} and a {len(key.key)}-byte key, which "
                "setup-keys never writes (the file was edited)"
            )
        return key
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OSError(f"the sealing key {audit_dir / KEY_NAME} is unreadable: {exc}") from exc


def write_writer_key(audit_dir: Path, key: SealKey) -> None:
    """Replace the writer's key durably; the old key is gone from disk once this returns."""
    data = json.dumps({"every": key.every, "index": key.index, "key": key.key.hex()}).encode("ascii")
    replace_file(audit_dir / KEY_NAME, data, durable=True)


def new_key(*, every: int, head_seq: int) -> SealKey:
    """A fresh key for the first seal position after ``head_seq``."""
    if every < 2:
        raise UsageError(f"--every {every}: a seal every N records needs N of at least 2")
    return SealKey(every=every, index=head_seq // every + 1, key=secrets.token_bytes(32))


def seal_extra(writer: SealKey, *, prev: str, seq: int) -> tuple[dict[str, object], SealKey]:
    """The seal record's ``extra`` for position ``seq``, and the key to persist afterwards."""
    index = seq // writer.every
    if index < writer.index:
        # The key on disk is for a later seal than the chain has reached: it was replaced (or the
        # day files restored from an older copy). It cannot seal this position; refusing keeps the
        # log from growing past a seal no key proves.
        raise OSError(
            f"the sealing key is for seal {writer.index} but the chain has reached only seal {index} "
            f"(record seq {seq}): {KEY_NAME} was replaced or the day files were restored from an "
            "older copy; put back the matching key or day files"
        )
    current = writer.at(index)
    return {"index": index, "every": writer.every, "mac": current.mac(prev, seq)}, current.at(index + 1)


def remove_tmp(audit_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (audit_dir / KEY_NAME).with_suffix(".tmp").unlink()
