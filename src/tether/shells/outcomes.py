"""What an operation on one shell produced: the facts a tool renders and a panel shows.

Invariant: an ``Outcome`` is a result, never an error: a wait that timed out, a non-zero exit, a
shell that ended are all outcomes (``met``/``exit_code``/``lines`` say so). Failures a caller
caused or a policy decided are ``TetherError``s with their stable code, raised, and turned into
an error entry per task by the tools layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.shell import ShellSandboxInfo
from tether.shells.waits import WaitOutcome


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
    sandbox: ShellSandboxInfo | None = None  # a confined shell's run: what its sandbox denied
    before: int | None = None  # shell_read history: the action.before of the page before this one
    # ``met`` False: why (``unmet_of``); ``None`` on an outcome that does not say.
    unmet: str | None = None


def unmet_of(out: WaitOutcome) -> str | None:
    """Why a wait was not met, in a few words: ``timeout``, ``shell ended``, ``exit=4 ≠ expected 0``,
    ``incomplete line``, ``pattern overran``, ``shell replaced by sh`` (``None``: it was met)."""
    if out.met:
        return None
    if out.timed_out:
        return "timeout" if out.detail.startswith("timeout") else "pattern overran"
    if out.shell_gone:
        return "shell ended"
    if out.replaced_by:
        return f"shell replaced by {out.replaced_by}"
    if out.run_verdict == "incomplete":
        return "incomplete line"
    if out.kind == "exit" and out.detail.startswith("exit="):
        return out.detail.split(" (", 1)[0]  # the status and the code expected
    return out.detail.split(" (", 1)[0] or "not met"
