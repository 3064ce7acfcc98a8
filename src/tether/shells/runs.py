"""``run`` and ``retry``: a command typed at the shell's prompt, or input to the program in front.

Invariant: a command is typed through the shell integration's
loader only when the shell sits at its prompt (``prompt.ready``): the line is then exactly the
command, and the run's token binds the shell's own start and end events to it, so its exit status
is the shell's ``$?``. When another program holds the terminal, the text goes to that program as
input, the result says so, and no exit status is ever promised for it (``wait.kind=exit`` on it is
refused before anything is sent). ``timeoutMs`` only reports; nothing here kills a process.
A run in a confined shell ends with what its sandbox denied (``Outcome.sandbox``, and the same
deny marker and hint a one-shot result carries) and what the repository check neutralised.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from tether.errors import NotFoundError, RefusedError, StorageError
from tether.shell import ShellSandboxInfo, sandbox_lines
from tether.shells import accept, views
from tether.shells.domain import PendingRun, Shells
from tether.shells.host import ShellHost
from tether.shells.integration import payload
from tether.shells.integration.script import INSERT_KEYS
from tether.shells.integration.tracker import RunTrack
from tether.shells.logs import log_size
from tether.shells.outcomes import Outcome, unmet_of
from tether.shells.prompt import Readiness, front_note, ready, recover_run, settled
from tether.shells.records import RunRecord, now_ms
from tether.shells.requests import (
    DEFAULT_POLL_MS,
    DEFAULT_TIMEOUT_MS,
    RetryAction,
)
from tether.shells.safety.hooks import WriteDecision
from tether.shells.shaping import cap_tail
from tether.shells.tmux.commands import PaneInfo
from tether.shells.waits import WaitOutcome
from tether.shells.writes import (
    Write,
    both,
    guarded,
    new_buffer,
    new_token,
    refuse_exit_wait,
    settle,
    unwrappable_reason,
    wait_spec,
    with_notes,
)

# ---- run ----------------------------------------------------------------------------------------


async def run(shells: Shells, w: Write, command: str) -> Outcome:
    # Before the safety path: a command that can never carry its own status is told so first
    # (the guard would call an unfinished line such as `echo a \` unparseable, hiding the reason).
    refuse_exit_wait(w.wait, unwrappable_reason(command))
    async with guarded(shells, w, "run", command) as decision:
        outcome = await _run_decided(shells, w, decision, command)
    return with_notes(outcome, decision.notes)


async def _run_decided(shells: Shells, w: Write, decision: WriteDecision, written: str) -> Outcome:
    text = decision.text
    expanded = "expanded (a macro is typed as-is, without exit markers)"
    refuse_exit_wait(w.wait, expanded if decision.expanded else unwrappable_reason(text))
    host, pane = await shells.pane(w.shell_id)
    if w.safety.dryrun:
        return Outcome(
            shell=w.shell_id,
            lines=(f"[dryrun] would run: {decision.shown or text}", "[dryrun] nothing was sent"),
        )
    if decision.expanded and not decision.submit:
        return await _type_unsubmitted(shells, host, pane, w, text)
    budget = w.wait.timeout_ms if w.wait is not None else DEFAULT_TIMEOUT_MS
    where = await ready(shells, host, pane, budget)
    if where.where == "continuation":
        raise RefusedError(
            f"shell {w.shell_id} waits for the rest of an unfinished command line (a PS2 prompt); "
            "finish it with shell_send, or cancel it with shell_send keys ['C-c']; nothing was sent"
        )
    if where.where == "exited":
        raise NotFoundError(f"shell {w.shell_id} has ended; open a new one with shell_open")
    if where.where == "program":
        if w.wait is not None and w.wait.kind == "exit":
            raise RefusedError(
                f"cannot wait for exit: {where.program or 'a program'} runs in front of shell {w.shell_id}, "
                "so the command would be its input, not a command of the shell; wait for it to end "
                "(shell_read wait idle), or use shell_send to type into it"
                + (f" ({where.detail})" if where.detail else "")
            )
        return await _as_input(shells, host, pane, w, decision, written, where)
    return await _typed_run(shells, host, pane, w, decision, written, where)


async def _typed_run(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    w: Write,
    decision: WriteDecision,
    written: str,
    where: Readiness,
) -> Outcome:
    assert where.activity is not None
    token = new_token()
    # The guard judges the line now, with what the shell has defined (the lock is held, the shell at
    # its prompt); an incomplete command is put on the line, not run.
    plan = await accept.plan_run(shells, host, pane, decision, token)
    if plan.held is not None:
        return await _held(shells, host, pane, w, plan)
    offset = log_size(host.log_of(w.shell_id))
    pending = PendingRun(
        run_id=secrets.token_hex(4),
        shell_id=w.shell_id,
        token=token,
        # The record keeps the command as written (macro and vault references unexpanded): what a
        # retry expands again, and never a value.
        command=written,
        actor=w.actor,
        started_ms=now_ms(),
        log_offset=offset,
        prompt_before=where.activity.prompt,
    )
    shells.pending[pending.run_id] = pending
    spec = wait_spec(w.wait, shells.hooks.masking)
    track = RunTrack(token=token, prompt_before=where.activity.prompt, at_exit=spec.kind == "exit")
    out: WaitOutcome | None = None
    try:
        # The keys leave before this task first waits (``now``): the call's other shells would
        # otherwise run their guards first, and this command would wait for all of them.
        typing = functools.partial(host.type_keys_then_text, pane, plan.keys, plan.text, now=True)
        if spec.kind == "none":
            await typing()
            # Nothing is awaited, so nothing is read: whatever output already raced into the log
            # stays for the next read, and the reader keeps its place.
            out = WaitOutcome(
                kind="none",
                met=True,
                detail="returned at once (the command keeps running)",
                end_offset=offset,
            )
        else:
            # The wait reads the log from before the keys, so it may start while tmux still answers
            # for them (its reply costs a round trip the command does not need to wait for).
            waiting = asyncio.ensure_future(
                shells.waits(host).wait(
                    pane,
                    spec,
                    offset,
                    nonce=shells.nonce_of(w.shell_id),
                    run=track,
                    on_lost=lambda: recover_run(shells, host, pane),
                )
            )
            out = await both(typing(), waiting)
    except BaseException:
        _save_failing(shells, pending, out, reader=w.actor)
        raise
    shape = functools.partial(
        _shape_run, shells, host, pane, w, pending.run_id, out, offset, where, token=token
    )
    outcome = await _typed(shells, pending, out, shape)
    return with_notes(outcome, plan.notes)


async def _held(shells: Shells, host: ShellHost, pane: PaneInfo, w: Write, plan: accept.RunPlan) -> Outcome:
    """An incomplete command waits on the command line: bash would wait for the rest."""
    offset = log_size(host.log_of(w.shell_id))
    shells.records.touch(w.shell_id)
    if plan.keys or plan.text:
        await host.type_keys_then_text(pane, plan.keys, plan.text)
    out = await settle(shells, host, pane, w, offset)
    lines = await views.run_output(shells, w.shell_id, offset, out.end_offset, w.actor)
    note = (
        f"[not run: the command is incomplete ({plan.held}); it waits on the command line — send the "
        "rest with shell_send (it runs once complete, judged whole), or clear it with keys ['C-u']]"
    )
    return Outcome(
        shell=w.shell_id,
        waited="settle",
        met=False,
        unmet="incomplete line",
        elapsed_ms=out.elapsed_ms,
        lines=(*cap_tail(lines.lines, w.output.lines), *plan.notes, note),
    )


async def _shape_run(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    w: Write,
    run_id: str,
    out: WaitOutcome,
    offset: int,
    where: Readiness,
    *,
    token: int = 0,
) -> Outcome:
    start = out.begin_offset if out.begin_offset is not None else offset
    output, notes = w.output, []
    if out.host_silent and output.showing in ("tail", "screen", "diff"):
        # The screen is tmux's, on a host that did not answer the wait: the log has the output.
        output = replace(output, showing="since")
        notes.append(f"[shown from the log, not the {w.output.showing}: the host did not answer in time]")
    lines = await views.shaped(shells, host, pane, output, w.actor, start, out.end_offset)
    sandbox = await _sandbox(shells, host, pane, token, out, lines) if token else None
    notes[:0] = sandbox_lines(sandbox)
    if where.waited_ms >= 50:
        notes.append(f"[waited {where.waited_ms} ms for the shell's prompt before typing]")
    if not out.met:
        notes.append(f"[wait {out.kind}: {out.detail}]")
    # A host that did not answer the wait in its time is not asked again in this call.
    if out.timed_out and not out.host_silent and (front := await front_note(host, pane)) is not None:
        notes.append(front)
    return Outcome(
        shell=w.shell_id,
        run_id=run_id,
        exit_code=out.exit_code,
        waited=out.kind,
        met=out.met,
        unmet=unmet_of(out),
        elapsed_ms=out.elapsed_ms,
        lines=(*lines, *notes),
        sandbox=sandbox,
    )


async def _sandbox(
    shells: Shells, host: ShellHost, pane: PaneInfo, token: int, out: WaitOutcome, lines: Sequence[str]
) -> ShellSandboxInfo | None:
    """What a confined shell's sandbox denied during this run (``None``: not confined)."""
    confinement = shells.confinement_of(pane.shell_id)
    if confinement is None:
        return None
    rec = shells.record(pane.shell_id)
    if rec is None:
        return None
    return await host.sandbox_report(
        pane,
        confinement,
        cwd=rec.cwd,
        token=token,
        ended=out.run_verdict == "ended",
        output="\n".join(lines),
    )


async def _typed(
    shells: Shells, p: PendingRun, out: WaitOutcome, shape: Callable[[], Awaitable[Outcome]]
) -> Outcome:
    """A run whose keys were typed, saved and shaped. Once the command ran, a write of tether's the
    file system refuses (a full disk: the command may have filled it) costs the bookkeeping, never
    the result: an error that says "call again" would run the command twice."""
    try:
        _save(shells, p, out, reader=p.actor)
        return await shape()
    except StorageError as exc:
        ran = "ran" if out.exit_code is not None else "was typed"
        note = (
            f"[the command {ran}, but tether could not record it or show its output: {exc.message}; "
            "once there is room, shell_read shows the output: do not run the command again to see it]"
        )
        return Outcome(
            shell=p.shell_id,
            run_id=p.run_id,
            exit_code=out.exit_code,
            waited=out.kind,
            met=out.met,
            unmet=unmet_of(out),
            elapsed_ms=out.elapsed_ms,
            lines=(note,),
        )


def _save_failing(shells: Shells, p: PendingRun, out: WaitOutcome | None, *, reader: str) -> None:
    """Save a run whose typing or wait failed: that failure is the one the caller gets."""
    with contextlib.suppress(StorageError):
        _save(shells, p, out, reader=reader)


def _save(shells: Shells, p: PendingRun, out: WaitOutcome | None, *, reader: str) -> None:
    """One transaction: the run, its outcome so far, and this reader's position after it."""
    record = RunRecord(
        run_id=p.run_id,
        shell_id=p.shell_id,
        token=p.token,
        command=p.command,
        actor=p.actor,
        started_ms=p.started_ms,
        log_offset=p.log_offset,
        exit_code=None,
        end_offset=None,
        typed_as_input=p.typed_as_input,
        prompt_before=p.prompt_before,
    )
    done = out is not None and out.exit_code is not None
    try:
        shells.records.save_run(
            record,
            exit_code=out.exit_code if done and out is not None else None,
            end_offset=out.end_offset if done and out is not None else None,
            reader=reader if out is not None else None,
            read_offset=out.end_offset if out is not None else 0,
        )
    finally:
        shells.pending.pop(p.run_id, None)


async def _as_input(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    w: Write,
    decision: WriteDecision,
    written: str,
    where: Readiness,
) -> Outcome:
    """The shell is not at its prompt: the text (and Enter) go to the program in front."""
    program = where.program or "a program"
    offset = log_size(host.log_of(w.shell_id))
    pending = PendingRun(
        run_id=secrets.token_hex(4),
        shell_id=w.shell_id,
        token=0,
        command=written,
        actor=w.actor,
        started_ms=now_ms(),
        log_offset=offset,
        prompt_before=0,
        typed_as_input=program,
    )
    notes = await accept.judge_typed(
        shells, host, pane, decision, [("text", decision.text), ("key", "Enter")]
    )
    shells.pending[pending.run_id] = pending
    out: WaitOutcome | None = None
    try:
        await host.type_raw(pane, payload.to_bytes(decision.text), buffer=new_buffer())
        await host.send_keys(pane, ("Enter",))
        spec = wait_spec(w.wait, shells.hooks.masking)
        if spec.kind == "idle":  # the program answered and waits again (or has ended)
            spec = replace(spec, kind="settle", poll_ms=max(spec.poll_ms, DEFAULT_POLL_MS), program_idle=True)
        if spec.kind == "none":
            out = WaitOutcome(kind="none", met=True, detail="returned at once", end_offset=offset)
        else:
            out = await shells.waits(host).wait(pane, spec, offset, nonce=shells.nonce_of(w.shell_id))
    except BaseException:
        _save_failing(shells, pending, out, reader=w.actor)
        raise
    shape = functools.partial(_shape_run, shells, host, pane, w, pending.run_id, out, offset, where)
    outcome = await _typed(shells, pending, out, shape)
    note = (
        f"[typed as input to {program}: the shell was not at its prompt, so this is not a command of "
        "the shell and has no exit status" + (f"; {where.detail}" if where.detail else "") + "]"
    )
    return replace(outcome, exit_code=None, lines=(*outcome.lines, *notes, note))


async def _type_unsubmitted(shells: Shells, host: ShellHost, pane: PaneInfo, w: Write, text: str) -> Outcome:
    """A macro set with ``submit: false``: its text is put on the line, Enter is not pressed."""
    offset = log_size(host.log_of(w.shell_id))
    shells.records.touch(w.shell_id)
    activity = await settled(shells, host, pane)
    if activity is not None and activity.phase == "prompt":
        await host.type_keys_then_text(pane, INSERT_KEYS, payload.insert_payload(text))
    else:
        await host.type_raw(pane, payload.to_bytes(text), buffer=new_buffer())
    out = await settle(shells, host, pane, w, offset)
    lines = await views.run_output(shells, w.shell_id, offset, out.end_offset, w.actor)
    return Outcome(
        shell=w.shell_id,
        waited="settle",
        met=out.met,
        unmet=unmet_of(out),
        elapsed_ms=out.elapsed_ms,
        lines=(*cap_tail(lines.lines, w.output.lines), "[macro typed without Enter (submit: false)]"),
    )


# ---- retry --------------------------------------------------------------------------------------


async def retry(shells: Shells, w: Write, action: RetryAction) -> Outcome:
    last = views.last_command(shells, w.shell_id)
    if last is None:
        raise NotFoundError(f"shell {w.shell_id} has run no command yet to retry; use action.kind='run'")
    if action.mode == "last-failed" and last.status == 0:
        return Outcome(
            shell=w.shell_id,
            exit_code=0,
            lines=(f"[the last command succeeded ({last.text!r}); nothing retried]",),
        )
    return await run(shells, w, last.text)
