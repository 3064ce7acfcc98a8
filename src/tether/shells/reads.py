"""``read``: a shell's output in one of the spec's shapes, optionally after a wait.

Invariant: a read never types; its ``exit`` wait binds to one run (``runId``, else the shell's
latest) and reads that run's end from the shell's own events — from the run's first byte, so a run
that ended before the read began is found at once. A run typed as input to a program in front
has no exit status, and an exit wait on it is refused, saying why. ``ifChanged`` compares the
screen this conversation saw last (masked, as stored) with the screen now.
"""

from __future__ import annotations

from dataclasses import replace

from tether.errors import NotFoundError, RefusedError
from tether.shells import shaping, views
from tether.shells.domain import PendingRun, Shells
from tether.shells.integration.tracker import RunTrack
from tether.shells.logs import log_size
from tether.shells.outcomes import Outcome, unmet_of
from tether.shells.prompt import front_note, recover_run
from tether.shells.records import RunRecord
from tether.shells.requests import Output, ReadAction, Wait
from tether.shells.writes import wait_spec


def _find_run(shells: Shells, shell_id: str, run_id: str | None) -> RunRecord | PendingRun | None:
    """A run by id, or the shell's latest — stored, or still being waited on in this process."""
    if run_id:
        return shells.records.run(run_id) or shells.pending.get(run_id)
    pending = [r for r in shells.pending.values() if r.shell_id == shell_id]
    stored = shells.records.last_run(shell_id)
    candidates: list[RunRecord | PendingRun] = [*pending, *([stored] if stored is not None else [])]
    return max(candidates, key=lambda r: (r.started_ms, r.log_offset)) if candidates else None


async def read(
    shells: Shells,
    shell_id: str,
    action: ReadAction,
    wait: Wait | None,
    output: Output,
    actor: str,
    *,
    path: str,
) -> Outcome:
    """``path`` names the task in messages (``tasks[2]``)."""
    host, pane = await shells.pane(shell_id)
    waited: str | None = None
    met: bool | None = None
    unmet: str | None = None
    elapsed: int | None = None
    exit_code: int | None = None
    run_id: str | None = None
    notes: list[str] = []
    silent = False  # the host did not answer the wait in its time: ask it nothing more
    if wait is not None:
        start = log_size(host.log_of(shell_id))
        track: RunTrack | None = None
        if wait.kind == "exit":
            run = _find_run(shells, shell_id, wait.run_id)
            if run is None or run.shell_id != shell_id:
                if wait.run_id is None:
                    raise NotFoundError(
                        f"{path}.wait: shell {shell_id} has no shell_run to wait for (kind=exit without "
                        "runId binds to the shell's latest shell_run); start the command with shell_run"
                    )
                raise NotFoundError(
                    f"{path}.wait.runId: run {wait.run_id} not found in shell {shell_id}; use the run=<id> "
                    "a shell_run on this shell returned"
                )
            if run.typed_as_input is not None:
                raise RefusedError(
                    f"{path}.wait: run {run.run_id} was typed as input to {run.typed_as_input} (the shell "
                    "was not at its prompt), so it has no exit status; wait with kind idle or match"
                )
            if run.token == 0:
                raise RefusedError(
                    f"{path}.wait: run {run.run_id} was typed before this shell had shell integration, so "
                    "its exit status cannot be read; wait with kind idle"
                )
            track = RunTrack(token=run.token, prompt_before=run.prompt_before, at_exit=True)
            start, run_id = run.log_offset, run.run_id
        nonce = shells.nonce_of(shell_id)
        activity = shells.activity(shell_id) if track is None else None
        out = await shells.waits(host).wait(
            pane,
            wait_spec(wait, shells.hooks.masking),
            start,
            nonce=nonce,
            run=track,
            at_prompt=activity is not None and activity.phase == "prompt",
            shown_prompt=activity.prompt if activity is not None else -1,
            on_lost=(lambda: recover_run(shells, host, pane)) if track is not None else None,
        )
        if track is not None and out.exit_code is not None and run_id is not None:
            shells.records.finish_run(run_id, out.exit_code, out.end_offset)
        waited, met, elapsed, exit_code = out.kind, out.met, out.elapsed_ms, out.exit_code
        unmet = unmet_of(out)
        if not out.met:
            notes.append(f"[wait {out.kind}: {out.detail}]")
        # A host that did not answer the wait in its time is not asked again in this call.
        silent = out.host_silent
        if out.timed_out and not silent and (front := await front_note(host, pane)) is not None:
            notes.append(front)
    if silent and action.regex is None and (action.mode in ("tail", "screen", "diff") or action.if_changed):
        # The screen is tmux's, on a host that did not answer the wait: the log has the output.
        notes.insert(
            0, f"[shown from the log (history), not the {action.mode}: the host did not answer in time]"
        )
        action = replace(action, mode="history", if_changed=False, before=None)
    if action.if_changed and action.regex is None:
        current = await views.screen_lines(shells, host, pane)
        previous = shells.records.read_position(shell_id, actor)
        if previous is not None and previous[1] == "\n".join(current):
            return Outcome(
                shell=shell_id,
                run_id=run_id,
                exit_code=exit_code,
                waited=waited,
                met=met,
                unmet=unmet,
                elapsed_ms=elapsed,
                lines=(shaping.UNCHANGED, *notes),
            )
        offset = previous[0] if previous is not None else 0
        shells.records.set_read_position(shell_id, actor, offset, "\n".join(current))
    view = await views.read_view(shells, host, pane, action, output.lines, actor, f"{path}.action")
    return Outcome(
        shell=shell_id,
        run_id=run_id,
        exit_code=exit_code,
        waited=waited,
        met=met,
        unmet=unmet,
        elapsed_ms=elapsed,
        lines=(*view.lines, *notes),
        before=view.before,
    )
