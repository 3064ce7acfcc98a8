"""``steps``: a short scripted exchange — each step's text, then its own condition.

Invariant: a step typed while the shell is at its prompt is a command of its own (its ``idle`` is
that command's end, never the previous step's), judged by the guard as it is typed, with what the
steps before it defined; typed to a program in front it is that program's input, and its ``idle``
is the screen settling with nothing in front working (``WaitSpec.program_idle``).
"""

from __future__ import annotations

from dataclasses import replace

from tether.shells import accept, views
from tether.shells.domain import Shells
from tether.shells.host import ShellHost
from tether.shells.integration import payload
from tether.shells.integration.tracker import RunTrack
from tether.shells.logs import log_size
from tether.shells.outcomes import Outcome, unmet_of
from tether.shells.prompt import ready, settled
from tether.shells.requests import (
    DEFAULT_POLL_MS,
    DEFAULT_TIMEOUT_MS,
    StepsAction,
)
from tether.shells.safety.hooks import WriteDecision
from tether.shells.tmux.commands import PaneInfo
from tether.shells.waits import WaitSpec
from tether.shells.writes import (
    Write,
    guarded,
    new_buffer,
    new_token,
)

# ---- steps --------------------------------------------------------------------------------------


async def steps(shells: Shells, w: Write, action: StepsAction) -> Outcome:
    sends = "\n".join(s.send or "" for s in action.steps)
    async with guarded(shells, w, "steps", sends) as decision:
        return await _steps(shells, w, action, sends, decision)


async def _steps(
    shells: Shells, w: Write, action: StepsAction, sends: str, decision: WriteDecision
) -> Outcome:
    host, pane = await shells.pane(w.shell_id)
    if w.safety.dryrun:
        return Outcome(shell=w.shell_id, lines=(f"[dryrun] would send: {sends}",))
    base_timeout = w.wait.timeout_ms if w.wait is not None else DEFAULT_TIMEOUT_MS
    poll = w.wait.poll_ms if w.wait is not None else DEFAULT_POLL_MS
    lines: list[str] = []
    total_ms = 0
    met = True
    unmet: str | None = None
    first = log_size(host.log_of(w.shell_id))
    shells.records.touch(w.shell_id)
    nonce = shells.nonce_of(w.shell_id)
    held = ""  # an incomplete command a step put on the line: the next step continues it
    for n, step in enumerate(action.steps, 1):
        offset = log_size(host.log_of(w.shell_id))
        exp = step.expect
        timeout = step.timeout_ms or base_timeout
        spec = WaitSpec(
            kind=exp.kind if exp is not None else "settle",
            timeout_ms=timeout,
            poll_ms=poll,
            regex=exp.regex if exp is not None else None,
            masking=shells.hooks.masking,
            path=exp.path if exp is not None else None,
        )
        track: RunTrack | None = None
        if step.send is not None:
            track, held, notes = await _type_step(shells, host, pane, decision, held, step.send, timeout)
            lines.extend(notes)
        if track is None and spec.kind == "idle":
            # A program's input: it is idle once its screen settled and it waits again (or ended).
            spec = replace(spec, kind="settle", program_idle=True)
        out = await shells.waits(host).wait(pane, spec, offset, nonce=nonce, run=track)
        total_ms += out.elapsed_ms
        lines.append(f"[{step.label or f'step {n}'}: {out.detail}]")
        if not out.met:
            met, unmet = False, unmet_of(out)
            break
    end = log_size(host.log_of(w.shell_id))
    lines.extend(views.with_dropped(await views.run_output(shells, w.shell_id, first, end, w.actor)))
    return Outcome(
        shell=w.shell_id, waited="steps", met=met, unmet=unmet, elapsed_ms=total_ms, lines=tuple(lines)
    )


async def _type_step(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    decision: WriteDecision,
    held: str,
    text: str,
    budget_ms: int,
) -> tuple[RunTrack | None, str, tuple[str, ...]]:
    """Type one step's text: as a command when the shell is at its prompt (its end is then this
    step's own prompt), else as input to the program in front (``None``). Each step is judged as
    it is typed, with what the steps before it defined; an incomplete one (``held``) waits on the
    line and the next step continues it. Returns (track, held, notes)."""
    activity = await settled(shells, host, pane, budget_ms)
    if activity is not None and activity.phase == "running":
        fg = await host.foreground(pane)
        if fg.shell_in_front:  # the previous step's prompt hooks: wait for the prompt
            activity = (await ready(shells, host, pane, budget_ms)).activity
    if activity is not None and activity.phase == "prompt":
        token = new_token()
        command = f"{held}\n{text}" if held else text
        plan = await accept.plan_run(shells, host, pane, decision, token, command=command)
        await host.type_keys_then_text(pane, plan.keys, plan.text)
        if plan.held is not None:
            return None, command, plan.notes
        return RunTrack(token=token, prompt_before=activity.prompt), "", plan.notes
    notes = await accept.judge_typed(shells, host, pane, decision, [("text", text), ("key", "Enter")])
    await host.type_raw(pane, payload.to_bytes(text), buffer=new_buffer())
    await host.send_keys(pane, ("Enter",))
    return None, "", notes
