"""Keeping a tether process's own credentials out of reach of the commands it starts.

Invariant: after ``seal_environment(section)`` no variable the child-environment scrub removes
(credential names, URLs carrying a password, loader hooks — ``tether.process.env``) is left in this
process: not in ``os.environ`` (so in no child's environment, and not in the tmux server a control
client starts), not in libc's ``environ``, and not in the memory the kernel shows as
``/proc/PID/environ``. The process is also made non-dumpable.

Why the memory: ``/proc/PID/environ`` is the block of the process's initial stack that held the
environment at ``execve``; changing ``os.environ`` (``unsetenv``) never touches it. Any process of
the same user can read it — a child whose own environment was scrubbed reads
``/proc/$PPID/environ`` — and a root child can even when the parent is non-dumpable. So the
entries of the scrubbed variables are overwritten with zero bytes where they lie, after they left
libc's ``environ`` (whose remaining pointers still point into the block, so nothing kept moves).
Non-dumpable stops processes of the same *unprivileged* user from reading the process's memory
through ``ptrace`` or ``/proc/PID/mem``; a root child keeps that power (README, Limits).

No ``from __future__ import annotations``: ``SealReport``'s annotations would be compiled one by one
(``tether.config`` says why).
"""

import ctypes
import logging
import os
from typing import Final, NamedTuple

from tether.config import EnvSection
from tether.process.env import is_scrubbed, scrub_patterns

logger = logging.getLogger(__name__)

_PR_SET_DUMPABLE: Final = 4
# Fields 50 and 51 of /proc/PID/stat (man 5 proc), counted from the state field (field 3).
_ENV_START_FIELD: Final = 50 - 3
_ENV_END_FIELD: Final = 51 - 3


class SealReport(NamedTuple):
    """What ``seal_environment`` did: the names removed, and whether the kernel's copy was wiped."""

    removed: tuple[str, ...]
    wiped: bool


def _environ_block() -> tuple[int, int] | None:
    """[env_start, env_end) of this process, from /proc/self/stat."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) <= _ENV_END_FIELD:
        return None
    start, end = int(fields[_ENV_START_FIELD]), int(fields[_ENV_END_FIELD])
    return (start, end) if 0 < start < end else None


def _wipe(names: set[bytes]) -> bool:
    """Zero the kernel-visible entries of ``names``; False when the block cannot be trusted."""
    block = _environ_block()
    if block is None:
        return False
    start, end = block
    try:
        with open("/proc/self/environ", "rb") as handle:
            shown = handle.read()
    except OSError:
        return False
    memory = ctypes.string_at(start, end - start)
    if memory != shown:
        # Something already rewrote the block (a proctitle library): do not guess at its layout.
        return False
    offset = 0
    for entry in memory.split(b"\0"):
        if entry.partition(b"=")[0] in names:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1
    return True


def seal_environment(section: EnvSection) -> SealReport:
    """Remove every scrubbed variable from this process and from its ``/proc/PID/environ``.

    Call it once at start-up, before any thread or child exists (the CLI does). Idempotent.
    """
    patterns = scrub_patterns(section)
    doomed = [name for name, value in os.environ.items() if is_scrubbed(name, value, patterns, section.keep)]
    for name in doomed:
        del os.environ[name]  # unsetenv: out of libc's environ and of posix.environ as well
    wiped = _wipe({os.fsencode(name) for name in doomed}) if doomed else True
    if not wiped:
        logger.warning(
            "could not clear this process's /proc/PID/environ; processes it starts may read the "
            "credentials it was started with"
        )
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        logger.warning("could not make this process non-dumpable")
    return SealReport(removed=tuple(doomed), wiped=wiped)
