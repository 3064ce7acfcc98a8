"""What an operation on one shell produced: the facts a tool renders and a panel shows.

Invariant: an ``Outcome`` is a result, never an error: a wait that timed out, a non-zero exit, a
shell that ended are all outcomes (``met``/``exit_code``/``lines`` say so). Failures a caller
caused or a policy decided are ``TetherError``s with their stable code, raised, and turned into
an error entry per task by the tools layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """``waited`` is the wait kind (``None``: nothing waited for); ``met`` False: not met in time
    (or the shell ended first); ``lines`` are what the model reads, notes included."""

    shell: str
    run_id: str | None = None
    exit_code: int | None = None
    waited: str | None = None
    met: bool | None = None
    elapsed_ms: int | None = None
    lines: tuple[str, ...] = ()
    before: int | None = None  # shell_read history: the action.before of the page before this one
