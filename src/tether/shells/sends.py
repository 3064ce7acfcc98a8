"""``send``: literal text and key names into whatever holds the terminal.

Invariant: text at the shell's own prompt goes through the loader (inserted exactly, a tab stays a
tab), and every key that makes the shell run its line is pressed only after the guard judged the
line readline holds (``accept.send``); text for a program in front, or a secret for its own prompt,
goes through a tmux paste buffer set over the control connection — never a file, never a
``send-keys`` argument.
"""

from __future__ import annotations

from tether.shells import accept, views
from tether.shells.domain import Shells
from tether.shells.logs import log_size
from tether.shells.outcomes import Outcome, unmet_of
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
    keys = action.keys
    if decision.expanded and decision.submit and not keys:
        keys = ("Enter",)  # a macro set with submit presses Enter itself
    # At the shell's prompt the loader inserts the text exactly (a tab stays a tab), and each Enter
    # is judged on the line readline holds (``accept``); a program's own input (or a secret for its
    # prompt) goes as exact bytes through a paste buffer set over the control connection.
    sent = await accept.send(shells, host, pane, decision, action.pre_keys, keys, buffer=new_buffer())
    out = await settle(shells, host, pane, w, offset)
    lines = await views.run_output(shells, w.shell_id, offset, out.end_offset, w.actor)
    held = (
        [
            f"[not run: the line is incomplete ({sent.held}); it waits on the command line — send the "
            "rest (it runs once complete, judged whole), or clear it with keys ['C-u']]"
        ]
        if sent.held
        else []
    )
    return Outcome(
        shell=w.shell_id,
        waited="settle",
        met=out.met,
        unmet=unmet_of(out),
        elapsed_ms=out.elapsed_ms,
        lines=(*cap_tail(lines.lines, w.output.lines), *sent.notes, *held),
    )
