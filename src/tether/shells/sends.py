"""``send``: literal text and key names into whatever holds the terminal.

Invariant: text at the shell's own prompt goes through the loader (inserted exactly, a tab stays a
tab); text for a program in front, or a secret for its own prompt, goes through a tmux paste
buffer set over the control connection — never a file, never a ``send-keys`` argument.
"""

from __future__ import annotations

from tether.errors import UsageError
from tether.shells import views
from tether.shells.domain import Shells
from tether.shells.integration import payload
from tether.shells.integration.script import INSERT_KEYS
from tether.shells.logs import log_size
from tether.shells.outcomes import Outcome
from tether.shells.requests import (
    SendAction,
)
from tether.shells.safety.hooks import WriteDecision
from tether.shells.shaping import cap_tail
from tether.shells.writes import (
    Write,
    guarded,
    new_buffer,
    settle,
    with_notes,
)

# ---- send ---------------------------------------------------------------------------------------


async def send(shells: Shells, w: Write, action: SendAction) -> Outcome:
    submit = "Enter" in action.keys or "C-m" in action.keys
    async with guarded(shells, w, "send", action.text, submit=submit) as decision:
        outcome = await _send(shells, w, action, decision)
    return with_notes(outcome, decision.notes)


async def _send(shells: Shells, w: Write, action: SendAction, decision: WriteDecision) -> Outcome:
    text = decision.text
    host, pane = await shells.pane(w.shell_id)
    if w.safety.dryrun:
        what = " ".join([*action.pre_keys, repr(decision.shown or text), *action.keys])
        return Outcome(shell=w.shell_id, lines=(f"[dryrun] would send: {what}", "[dryrun] nothing was sent"))
    offset = log_size(host.log_of(w.shell_id))
    shells.records.touch(w.shell_id)
    await host.send_keys(pane, action.pre_keys)
    if text:
        activity = shells.activity(w.shell_id) if not decision.typed_secret else None
        if activity is not None and activity.phase == "prompt" and not action.pre_keys:
            # readline edits a line: the loader inserts the text exactly (a tab stays a tab).
            await host.type_keys_then_text(
                pane, INSERT_KEYS, payload.insert_payload(text, decision.variables)
            )
        elif decision.variables:
            raise UsageError(
                "vault references are delivered only to a shell at its prompt; here a program runs in "
                "front: type the value into its own prompt instead (a reference alone is typed as the value)"
            )
        else:
            # A program's own input (or a secret for its prompt): exact bytes through a paste buffer
            # set over the control connection, never a file or a send-keys argument.
            await host.type_raw(pane, payload.to_bytes(text), buffer=new_buffer())
    keys = action.keys
    if decision.expanded and decision.submit and not keys:
        keys = ("Enter",)  # a macro set with submit presses Enter itself
    await host.send_keys(pane, keys)
    out = await settle(shells, host, pane, w, offset)
    lines = views.run_output(shells, w.shell_id, offset, out.end_offset, w.actor)
    return Outcome(
        shell=w.shell_id,
        waited="settle",
        met=out.met,
        elapsed_ms=out.elapsed_ms,
        lines=tuple(cap_tail(lines.lines, w.output.lines)),
    )
