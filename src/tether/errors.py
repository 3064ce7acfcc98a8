"""The root of tether's error tree, and the one rule every layer follows.

A command that fails, times out or is killed is a *result*, never an exception. Exceptions are for
infrastructure failures and for input a caller got wrong; each carries a stable ``code`` so that a
front door can map it without parsing text, and a message that says what was wrong, what is
allowed, and how to fix it.

    TetherError                     code: str, message: str
    ├── UsageError                  bad input from a caller (tool argument, CLI flag, config value)
    ├── RefusedError                a rule said no (lock held by a person, guard, vault locked)
    ├── NotFoundError               a named thing does not exist (shell id, job id, macro)
    ├── StorageError                the file system refused tether's own write (full, read-only)
    └── (layer errors)              ShellException (shell/), SessionError (shells/), …

Front doors turn a ``TetherError`` into a tool error or an exit status; anything else is a bug and
is logged with its traceback, but never crosses a front door as one.
"""

from __future__ import annotations

import errno


class TetherError(Exception):
    """An error with a stable machine-readable code and a human-actionable message."""

    code: str = "TETHER_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class UsageError(TetherError):
    """The caller sent something that is not allowed; the message names the field and the fix."""

    code = "INVALID_ARGUMENT"


class RefusedError(TetherError):
    """A policy refused the operation (manual lock, person typing, guard, locked vault group)."""

    code = "REFUSED"


class NotFoundError(TetherError):
    """A referenced object (shell, job, macro, workspace, snapshot) does not exist."""

    code = "NOT_FOUND"


class StorageError(TetherError):
    """The file system refused a write of tether's own (a full disk, a quota, a read-only mount):
    the machine's condition, not a bug; the message names the file and the fix."""

    code = "STORAGE_UNAVAILABLE"


# The errors a write gets from a full, over-quota or read-only file system (a ``StorageError``).
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
