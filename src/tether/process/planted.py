"""Reading a file that a process tether does not trust may have put in its place.

Invariant: such a read never follows a final symlink (``O_NOFOLLOW``), never blocks on a FIFO or a
device (``O_NONBLOCK``, then only a regular file is read), and never reads more than the caller's
limit; anything else — no file, a link, not a regular file, an error — is ``None``. A confined
shell writes its own state files and a repository names its own pointers: either may be hostile.
"""

from __future__ import annotations

import os
import stat


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """Up to ``limit + 1`` bytes of the regular file at ``path`` (more than ``limit`` tells the
    caller the file is longer), or ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit + 1
        # No buffered file object: what is read here is a few KB at most.
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
