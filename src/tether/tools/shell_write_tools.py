"""``shell_run`` (run / steps / retry) and ``shell_send``: everything that types into a shell.

Invariant: every write passes ``SessionHooks.before_write`` (locks, guard, macros: issue 5) before
a byte is typed and ``after_write`` afterwards; a ``run`` is typed wrapped with exit markers when
the shell sits at its prompt, otherwise (a REPL or other program in front) as plain input — and a
plain input can never promise an exit status, so ``wait.kind=exit`` on it is refused before
anything is sent. ``timeoutMs`` only reports; nothing here kills a process.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether.errors import NotFoundError, RefusedError
from tether.shells.engine import PaneInfo, SessionEngine
from tether.shells.logs import log_size
from tether.shells.reading import log_lines
from tether.shells.safety.hooks import WriteDecision, WriteIntent, WriteKind
from tether.shells.waits import WaitOutcome, WaitSpec
from tether.shells.wrapper import unwrappable_reason
from tether.tools import shell_render
from tether.tools.shell_args_model import (
    MAX_OUTPUT_LINES,
    Output,
    RetryAction,
    RunAction,
    SendAction,
    StepsAction,
    Task,
    Wait,
)
from tether.tools.shell_exec import Unit
from tether.tools.shell_render import TaskOutcome
from tether.tools.shell_views import diff_lines, run_output, screen_lines, tail_lines, with_dropped

_PROMPT_GRACE_S = 1.0
_SCREEN_SHOWINGS = frozenset({"tail", "screen", "diff"})
_ENV_FILE_SWEEP_S = 60.0


def wait_spec(wait: Wait | None, *, nonce: str | None = None) -> WaitSpec:
    if wait is None:
        return WaitSpec(kind="none", nonce=nonce)
    return WaitSpec(
        kind=wait.kind,
        timeout_ms=wait.timeout_ms,
        poll_ms=wait.poll_ms,
        code=wait.code,
        regex=wait.regex,
        path=wait.path,
        proc=wait.proc,
        threshold=wait.threshold,
        nonce=nonce,
    )


async def _shape(
    engine: SessionEngine, pane: PaneInfo, output: Output, actor: str, start: int, end: int
) -> list[str]:
    showing = output.showing
    if showing == "tail":
        return await tail_lines(engine, pane, output.lines)
    if showing == "screen":
        return await screen_lines(engine, pane)
    if showing == "diff":
        return await diff_lines(engine, pane, actor)
    lines = log_lines(engine.log_of(pane.shell_id), start, end, MAX_OUTPUT_LINES)
    if showing == "summary":
        return [
            *shell_render.cap_tail(list(lines.lines), min(output.lines, 5)),
            f"[{lines.total} lines total]",
        ]
    return with_dropped(lines)


def _outcome(
    task: Task[Any], shell_id: str, *, run_id: str | None, out: WaitOutcome, lines: list[str]
) -> TaskOutcome:
    notes: list[str] = []
    if not out.met:
        notes.append(f"[wait {out.kind}: {out.detail}]")
    return TaskOutcome(
        index=task.index,
        shell=shell_id,
        label=task.label,
        run_id=run_id,
        exit_code=out.exit_code,
        waited=out.kind if out.kind != "settle" else "settle",
        met=out.met,
        elapsed_ms=out.elapsed_ms,
        lines=(*lines, *notes),
    )


@asynccontextmanager
async def guarded(
    engine: SessionEngine, unit: Unit, actor: str, kind: WriteKind, text: str, *, submit: bool = True
) -> AsyncIterator[WriteDecision]:
    """``before_write`` … ``after_write`` around one write, with the same intent; the release runs
    whatever happens after a successful ``before_write`` (a refusal, a timeout, a cancellation).

    A vault env file the typed line would have sourced and deleted is removed here when the write
    failed (the line may never have been typed); after a success the shell deleted it, and a
    late sweep removes it should the line never have run (a Ctrl-C before it)."""
    s = unit.task.safety
    wait = unit.task.wait
    intent = WriteIntent(
        shell_id=unit.shell_id,
        actor=actor,
        kind=kind,
        text=text,
        lock=s.lock,
        bypass_guard=s.bypass_guard,
        reason=s.reason,
        dryrun=s.dryrun,
        force=s.force,
        wait_kind=wait.kind if wait is not None else None,
        submit=submit,
    )
    decision = await engine.hooks.before_write(intent)
    env_file = decision.env_file
    try:
        yield decision
    except BaseException:
        if env_file is not None:
            env_file.unlink(missing_ok=True)
            env_file = None
        raise
    finally:
        await engine.hooks.after_write(intent)
        if env_file is not None:
            asyncio.get_running_loop().call_later(_ENV_FILE_SWEEP_S, _unlink, env_file)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _refuse_exit_wait(wait: Wait | None, reason: str | None) -> None:
    if wait is not None and wait.kind == "exit" and reason is not None:
        raise RefusedError(f"cannot wait for exit: {reason}; use wait.kind='idle', or wrap it as sh -c '…'")


async def run_command(engine: SessionEngine, unit: Unit, actor: str, command: str) -> TaskOutcome:
    # Before the safety path: a command that can never carry the marker is told so first (the guard
    # would call an unfinished line such as `echo a \` unparseable, which hides the real problem).
    _refuse_exit_wait(unit.task.wait, unwrappable_reason(command))
    async with guarded(engine, unit, actor, "run", command) as decision:
        outcome = await _run_decided(engine, unit, actor, decision, command)
    return replace(outcome, lines=(*outcome.lines, *decision.notes)) if decision.notes else outcome


async def _run_decided(
    engine: SessionEngine, unit: Unit, actor: str, decision: WriteDecision, written: str
) -> TaskOutcome:
    task = unit.task
    wait = task.wait
    text = decision.text
    expanded = "expanded (a macro is typed as-is, without exit markers)"
    reason = expanded if decision.expanded else unwrappable_reason(text)
    _refuse_exit_wait(wait, reason)
    pane = await engine.pane(unit.shell_id)
    if task.safety.dryrun:
        return TaskOutcome(
            index=task.index,
            shell=unit.shell_id,
            label=task.label,
            lines=(f"[dryrun] would run: {decision.shown or text}", "[dryrun] nothing was sent"),
        )
    at_prompt = reason is None and await engine.await_prompt(pane, _PROMPT_GRACE_S)
    if not at_prompt and wait is not None and wait.kind == "exit":
        raise RefusedError(
            f"cannot wait for exit: shell {unit.shell_id} is not at its prompt (a program runs in front), "
            "so the command cannot carry an exit marker; wait for it first (shell_read wait idle), "
            "or use shell_send"
        )
    run, offset = await engine.start_run(pane, text, actor, wrap=at_prompt)
    # The record keeps the command as written (macro and vault references unexpanded): what a
    # retry expands again, and never a value or an env file's path.
    run = replace(run, command=written)
    engine.pending_runs[run.run_id] = run
    out: WaitOutcome | None = None
    prompt: asyncio.Task[bool] | None = None
    try:
        spec = wait_spec(wait, nonce=run.nonce if at_prompt else None)
        if not at_prompt and spec.kind == "idle":
            spec = replace(spec, kind="settle", poll_ms=max(spec.poll_ms, 150))
        if spec.kind == "none":
            # Nothing is awaited, so nothing is read: whatever output already raced into the log
            # (how much depends on scheduling) stays for the next read, and the reader keeps its place.
            out = WaitOutcome(
                kind="none",
                met=True,
                detail="returned at once (the command keeps running)",
                end_offset=offset,
            )
        else:
            out = await engine.waits.wait(engine.ref(pane), spec, offset)
        if at_prompt and out.exit_code is not None:
            # The end marker is printed before bash reads its next line: a run that ended hands
            # back a shell at its prompt (``shell_state`` idle), not one still in between. Output
            # read from the log is saved and shaped meanwhile (a few ms of bash's own work); a
            # screen-based shape must see the prompt, so it waits first.
            prompt = asyncio.ensure_future(engine.await_prompt(pane, _PROMPT_GRACE_S))
            if task.output.showing in _SCREEN_SHOWINGS:
                await prompt
    finally:
        # One transaction: the run, its outcome so far, and this reader's position after it.
        engine.records.save_run(
            run,
            exit_code=out.exit_code if out is not None else None,
            end_offset=out.end_offset if out is not None and out.exit_code is not None else None,
            reader=actor if out is not None else None,
            read_offset=out.end_offset if out is not None else 0,
        )
        engine.pending_runs.pop(run.run_id, None)
    start = out.begin_offset if out.begin_offset is not None else offset
    try:
        lines = await _shape(engine, pane, task.output, actor, start, out.end_offset)
        if prompt is not None:
            await prompt
    finally:
        if prompt is not None and not prompt.done():
            prompt.cancel()
    return _outcome(task, unit.shell_id, run_id=run.run_id, out=out, lines=lines)


async def run_steps(engine: SessionEngine, unit: Unit, actor: str, action: StepsAction) -> TaskOutcome:
    sends = "\n".join(s.send or "" for s in action.steps)
    async with guarded(engine, unit, actor, "steps", sends):
        return await _steps(engine, unit, actor, action, sends)


async def _steps(
    engine: SessionEngine, unit: Unit, actor: str, action: StepsAction, sends: str
) -> TaskOutcome:
    task = unit.task
    pane = await engine.pane(unit.shell_id)
    if task.safety.dryrun:
        return TaskOutcome(
            index=task.index, shell=unit.shell_id, label=task.label, lines=(f"[dryrun] would send: {sends}",)
        )
    base_timeout = task.wait.timeout_ms if task.wait is not None else 30_000
    lines: list[str] = []
    total_ms = 0
    met = True
    first = log_size(engine.log_of(unit.shell_id))
    engine.records.touch(unit.shell_id)
    for n, step in enumerate(action.steps, 1):
        offset = log_size(engine.log_of(unit.shell_id))
        if step.send is not None:
            await engine.type_lines(pane, [step.send], submit=True)
        exp = step.expect
        spec = WaitSpec(
            kind=exp.kind if exp is not None else "settle",
            timeout_ms=step.timeout_ms or base_timeout,
            poll_ms=task.wait.poll_ms if task.wait is not None else 150,
            regex=exp.regex if exp is not None else None,
            path=exp.path if exp is not None else None,
        )
        out = await engine.waits.wait(engine.ref(pane), spec, offset)
        total_ms += out.elapsed_ms
        lines.append(f"[{step.label or f'step {n}'}: {out.detail}]")
        if not out.met:
            met = False
            break
    end = log_size(engine.log_of(unit.shell_id))
    lines.extend(with_dropped(run_output(engine, unit.shell_id, first, end, actor)))
    return TaskOutcome(
        index=task.index,
        shell=unit.shell_id,
        label=task.label,
        waited="steps",
        met=met,
        elapsed_ms=total_ms,
        lines=tuple(lines),
    )


async def run_retry(engine: SessionEngine, unit: Unit, actor: str, action: RetryAction) -> TaskOutcome:
    last = engine.records.last_run(unit.shell_id)
    if last is None:
        raise NotFoundError(f"shell {unit.shell_id} has no earlier shell_run to retry; use action.kind='run'")
    if action.mode == "last-failed" and last.exit_code == 0:
        return TaskOutcome(
            index=unit.task.index,
            shell=unit.shell_id,
            label=unit.task.label,
            run_id=last.run_id,
            exit_code=0,
            lines=(f"[last command succeeded (run={last.run_id}); nothing retried]",),
        )
    return await run_command(engine, unit, actor, last.command)


async def shell_run_unit(engine: SessionEngine, unit: Unit, actor: str) -> TaskOutcome:
    action = unit.task.action
    if isinstance(action, RunAction):
        return await run_command(engine, unit, actor, action.command)
    if isinstance(action, StepsAction):
        return await run_steps(engine, unit, actor, action)
    assert isinstance(action, RetryAction)
    return await run_retry(engine, unit, actor, action)


async def shell_send_unit(engine: SessionEngine, unit: Unit, actor: str) -> TaskOutcome:
    action = unit.task.action
    assert isinstance(action, SendAction)
    submit = "Enter" in action.keys or "C-m" in action.keys
    async with guarded(engine, unit, actor, "send", action.text, submit=submit) as decision:
        outcome = await _send(engine, unit, actor, action, decision)
    return replace(outcome, lines=(*outcome.lines, *decision.notes)) if decision.notes else outcome


async def _type_secret(engine: SessionEngine, pane: PaneInfo, text: str) -> None:
    """Type text holding a vault value into a program's own prompt through a tmux paste buffer set
    over the control connection: never a file, never ``send-keys`` (whose arguments tmux may log
    in verbose mode), and the buffer is deleted by the paste itself."""
    name = "tether-v-" + secrets.token_hex(6)
    commands: list[tuple[str, ...]] = []
    for n, line in enumerate(text.split("\n")):
        if n:
            commands.append(("send-keys", "-t", pane.pane_id, "Enter"))
        if line:
            commands.append(("set-buffer", "-b", name, "--", line))
            commands.append(("paste-buffer", "-d", "-b", name, "-t", pane.pane_id))
    await engine.control.run_many(commands)


async def _send(
    engine: SessionEngine, unit: Unit, actor: str, action: SendAction, decision: WriteDecision
) -> TaskOutcome:
    task = unit.task
    text = decision.text
    pane = await engine.pane(unit.shell_id)
    if task.safety.dryrun:
        what = " ".join([*action.pre_keys, repr(decision.shown or text), *action.keys])
        return TaskOutcome(
            index=task.index,
            shell=unit.shell_id,
            label=task.label,
            lines=(f"[dryrun] would send: {what}", "[dryrun] nothing was sent"),
        )
    offset = log_size(engine.log_of(unit.shell_id))
    engine.records.touch(unit.shell_id)
    await engine.send_keys(pane, action.pre_keys)
    if decision.typed_secret:
        await _type_secret(engine, pane, text)
    elif decision.env_file is not None:
        await engine.type_lines(pane, text.split("\n"), submit=False)
    elif text:
        await engine.type_lines(pane, [text], submit=False)
    keys = action.keys
    if decision.expanded and decision.submit and not keys:
        keys = ("Enter",)  # a macro set with submit presses Enter itself
    await engine.send_keys(pane, keys)
    poll = task.wait.poll_ms if task.wait is not None else 150
    settle = WaitSpec(kind="settle", poll_ms=poll, timeout_ms=max(3000, 4 * poll))
    out = await engine.waits.wait(engine.ref(pane), settle, offset)
    lines = run_output(engine, unit.shell_id, offset, out.end_offset, actor)
    return TaskOutcome(
        index=task.index,
        shell=unit.shell_id,
        label=task.label,
        waited="settle",
        met=out.met,
        elapsed_ms=out.elapsed_ms,
        lines=tuple(shell_render.cap_tail(list(lines.lines), task.output.lines)),
    )
