"""The persistent-shell tools ``shell_open``, ``shell_run``, ``shell_send``, ``shell_read``,
``shell_state`` (spec 003), registered into a ``ToolRegistry`` by ``register_shell_tools``.

Invariant: handlers hold no logic of their own beyond wiring: arguments come only from
``shell_args`` (validated dataclasses), text only from ``shell_render``, shell work only from
``tether.shells``. Every task tool returns the summary-plus-blocks text (or plain text) and the
same facts as ``structuredContent`` matching ``shell_render.RESULT_SCHEMA``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tether.config import Config
from tether.errors import NotFoundError, RefusedError, UsageError
from tether.shells.engine import SessionEngine
from tether.shells.logs import log_size
from tether.shells.records import RunRecord
from tether.shells.safety.hooks import SessionHooks
from tether.tools import shell_render
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult
from tether.tools.shell_args import input_schema, parse_open, parse_read, parse_run, parse_send, parse_state
from tether.tools.shell_args_model import Call, OpenAction, ReadAction, SubscribeAction, Task
from tether.tools.shell_exec import Unit, run_plain, run_units
from tether.tools.shell_manage_kinds import revive
from tether.tools.shell_render import TaskOutcome
from tether.tools.shell_state_tool import STATE_SCHEMA, shell_state
from tether.tools.shell_subscriptions import ShellResources, Subscriptions, shell_uri
from tether.tools.shell_views import read_view, screen_lines
from tether.tools.shell_write_tools import shell_run_unit, shell_send_unit, wait_spec

HINT = """Persistent shells (tmux) that keep state between calls. Open one with shell_open, run
commands with shell_run (wait.kind exit gives the exit code; the result says run=<id>), type into
programs (REPLs, prompts, less, vim) with shell_send (text, then keys such as ["Enter"] or ["C-c"]),
read with shell_read (mode tail/screen/history/since/diff/summary, or search), list with shell_state.
Every call is { tasks: [ { target, action, wait, output, safety } ] }. Do not operate on shells
other conversations created unless the user asks. `exit` in shell_run ends the shell itself."""


class ShellTools:
    """The tool handlers plus the per-process state they share (engine, subscriptions)."""

    def __init__(
        self, config: Config, *, hooks_for: Callable[[SessionEngine], SessionHooks] | None = None
    ) -> None:
        self.config = config
        self.subscriptions = Subscriptions()
        self._hooks_for = hooks_for
        self._hooked: SessionEngine | None = None

    def engine(self) -> SessionEngine:
        engine = SessionEngine.get(self.config)
        # The safety hooks (locks, guard, macros, vault) go on each engine before its first write.
        if self._hooks_for is not None and engine is not self._hooked:
            engine.hooks = self._hooks_for(engine)
            self._hooked = engine
        return engine

    async def end_conversation(self, actor: str) -> None:
        """The conversation's MCP session closed: its subscriptions stop (its shells stay)."""
        await self.subscriptions.end_actor(actor)

    async def aclose(self) -> None:
        await self.subscriptions.close()
        await SessionEngine.close_home(self.config.home)

    @staticmethod
    def _result(call: Call[Any], outcomes: list[TaskOutcome], structured: bool) -> ToolResult:
        notes = [n for n in (call.concurrency_note,) if n]
        text = shell_render.render_result(outcomes, structured=structured, notes=notes)
        return ToolResult(
            text=text,
            structured=shell_render.outcome_json(outcomes),
            is_error=bool(outcomes) and all(not o.ok for o in outcomes),
        )

    # ---- shell_open -----------------------------------------------------------------------

    async def open(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_open(raw)
        engine = self.engine()
        live = await engine.live()
        wanted = sum(t.action.count for t in call.tasks)
        limit = self.config.sessions.max_sessions
        if len(live) + wanted > limit:
            raise RefusedError(
                f"shell_open: {len(live)} shells are open and {wanted} more were asked for, over maxSessions="
                f"{limit}; close shells (shell_manage close) or open fewer",
                code="MAX_SESSIONS",
            )
        gate = asyncio.Semaphore(call.concurrency)

        async def one(task: Task[OpenAction]) -> list[TaskOutcome]:
            a = task.action
            if a.from_id is not None:
                async with gate:
                    shell_id, lines = await revive(engine, a, ctx.actor, f"tasks[{task.index}].action")
                return [TaskOutcome(index=task.index, shell=shell_id, label=task.label, lines=tuple(lines))]

            async def make(n: int) -> TaskOutcome:
                async with gate:
                    label = a.label or ""
                    if label and a.count > 1:
                        label = f"{label}-{n + 1}"
                    rec = await engine.open_shell(
                        owner=ctx.actor,
                        label=label,
                        cwd=a.cwd,
                        cols=a.cols,
                        rows=a.rows,
                        idle_minutes=a.idle_minutes,
                    )
                    lines = [f"opened {rec.id} label={rec.label} cwd={rec.cwd}"]
                    if a.watch and ctx.notifier is not None:
                        self.subscriptions.subscribe(engine, ctx.actor, rec.id, ctx.notifier)
                        lines.append(
                            f"subscribed: new output arrives as notifications for {shell_uri(rec.id)}"
                        )
                    return TaskOutcome(index=task.index, shell=rec.id, label=task.label, lines=tuple(lines))

            return list(await asyncio.gather(*(make(n) for n in range(a.count))))

        outcomes = await run_plain(call, one)
        return self._result(call, outcomes, True)

    # ---- shell_run / shell_send -----------------------------------------------------------

    async def run(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_run(raw)
        engine = self.engine()
        outcomes = await run_units(
            engine, call, ctx.actor, write=True, work=lambda u: shell_run_unit(engine, u, ctx.actor)
        )
        structured = all(t.output.structured for t in call.tasks)
        return self._result(call, outcomes, structured)

    async def send(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_send(raw)
        engine = self.engine()
        outcomes = await run_units(
            engine, call, ctx.actor, write=True, work=lambda u: shell_send_unit(engine, u, ctx.actor)
        )
        return self._result(call, outcomes, True)

    # ---- shell_read -----------------------------------------------------------------------

    async def read(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_read(raw)
        engine = self.engine()

        async def work(unit: Unit) -> TaskOutcome:
            task, shell_id = unit.task, unit.shell_id
            action = task.action
            if isinstance(action, SubscribeAction):
                if ctx.notifier is None:
                    raise UsageError("subscribe needs a connection that can receive notifications (MCP)")
                await engine.pane(shell_id)
                new = self.subscriptions.subscribe(engine, ctx.actor, shell_id, ctx.notifier)
                note = "subscribed" if new else "already subscribed"
                return TaskOutcome(
                    index=task.index,
                    shell=shell_id,
                    label=task.label,
                    lines=(f"{note}: {shell_uri(shell_id)}",),
                )
            if not isinstance(action, ReadAction):
                gone = self.subscriptions.unsubscribe(ctx.actor, shell_id)
                note = "unsubscribed" if gone else "was not subscribed"
                return TaskOutcome(index=task.index, shell=shell_id, label=task.label, lines=(note,))
            return await self._read_one(engine, unit, action, ctx.actor)

        outcomes = await run_units(engine, call, ctx.actor, write=False, work=work)
        return self._result(call, outcomes, True)

    async def _read_one(
        self, engine: SessionEngine, unit: Unit, action: ReadAction, actor: str
    ) -> TaskOutcome:
        task, shell_id = unit.task, unit.shell_id
        pane = await engine.pane(shell_id)
        waited: str | None = None
        met: bool | None = None
        elapsed: int | None = None
        exit_code: int | None = None
        run_id: str | None = None
        notes: list[str] = []
        if task.wait is not None:
            start = log_size(engine.log_of(shell_id))
            nonce = None
            if task.wait.kind == "exit":
                run = _find_run(engine, shell_id, task.wait.run_id)
                if run is None or run.shell_id != shell_id:
                    which = f"run {task.wait.run_id}" if task.wait.run_id else "any shell_run"
                    raise NotFoundError(
                        f"tasks[{task.index}].wait.runId: {which} not found in shell {shell_id}; "
                        "use the run=<id> "
                        "a shell_run on this shell returned"
                    )
                if not run.wrapped:
                    raise RefusedError(
                        f"tasks[{task.index}].wait: run {run.run_id} was typed as plain input to a program "
                        "in front of the shell, so it has no exit status; wait with kind idle or match"
                    )
                nonce, start, run_id = run.nonce, run.log_offset, run.run_id
            out = await engine.waits.wait(engine.ref(pane), wait_spec(task.wait, nonce=nonce), start)
            if nonce is not None and out.exit_code is not None and run_id is not None:
                engine.records.finish_run(run_id, out.exit_code, out.end_offset)
            waited, met, elapsed, exit_code = out.kind, out.met, out.elapsed_ms, out.exit_code
            if not out.met:
                notes.append(f"[wait {out.kind}: {out.detail}]")
        if action.if_changed and action.regex is None:
            current = await screen_lines(engine, pane)
            previous = engine.records.read_position(shell_id, actor)
            if previous is not None and previous[1] == "\n".join(current):
                return TaskOutcome(
                    index=task.index,
                    shell=shell_id,
                    label=task.label,
                    run_id=run_id,
                    exit_code=exit_code,
                    waited=waited,
                    met=met,
                    elapsed_ms=elapsed,
                    lines=(shell_render.UNCHANGED, *notes),
                )
            offset = previous[0] if previous is not None else 0
            engine.records.set_read_position(shell_id, actor, offset, "\n".join(current))
        lines = await read_view(engine, pane, action, task.output.lines, actor)
        return TaskOutcome(
            index=task.index,
            shell=shell_id,
            label=task.label,
            run_id=run_id,
            exit_code=exit_code,
            waited=waited,
            met=met,
            elapsed_ms=elapsed,
            lines=(*lines, *notes),
        )

    # ---- shell_state ----------------------------------------------------------------------

    async def state(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        return await shell_state(self.engine(), parse_state(raw), ctx.actor)


def _find_run(engine: SessionEngine, shell_id: str, run_id: str | None) -> RunRecord | None:
    """A run by id, or the shell's latest — stored, or still being waited on in this process."""
    if run_id:
        return engine.records.run(run_id) or engine.pending_runs.get(run_id)
    pending = [r for r in engine.pending_runs.values() if r.shell_id == shell_id]
    stored = engine.records.last_run(shell_id)
    candidates = [*pending, *([stored] if stored is not None else [])]
    return max(candidates, key=lambda r: (r.started_ms, r.log_offset)) if candidates else None


def _tool(
    name: str,
    title: str,
    description: str,
    handler: Callable[[Mapping[str, Any], CallContext], Awaitable[ToolResult]],
    *,
    read_only: bool,
    output_schema: dict[str, Any],
) -> ToolDef:
    return ToolDef(
        name=name,
        title=title,
        description=description,
        input_schema=input_schema(name),
        handler=handler,
        output_schema=output_schema,
        read_only=read_only,
    )


def register_shell_tools(
    registry: ToolRegistry,
    *,
    config: Config,
    hints: dict[str, str] | None = None,
    closers: list[Callable[[], Awaitable[None]]] | None = None,
    hooks_for: Callable[[SessionEngine], SessionHooks] | None = None,
) -> ShellTools:
    """Add the five tools and the per-shell resources to ``registry``; ``hooks_for`` builds the
    ``SessionHooks`` (the safety path) installed on every engine the tools use."""
    tools = ShellTools(config, hooks_for=hooks_for)
    result = shell_render.RESULT_SCHEMA
    registry.add(
        _tool(
            "shell_open",
            "Open persistent shells",
            "Open persistent tmux shells (action.kind=open: "
            "count, cwd, label, cols, rows, idleMinutes, watch, from).",
            tools.open,
            read_only=False,
            output_schema=result,
        )
    )
    registry.add(
        _tool(
            "shell_run",
            "Run a command in a persistent shell",
            "Run a command in a persistent shell "
            "(kind run/steps/retry) and wait (none/idle/bell/match/exit/file/noproc/cpu); cd and "
            "variables persist.",
            tools.run,
            read_only=False,
            output_schema=result,
        )
    )
    registry.add(
        _tool(
            "shell_send",
            "Type into a persistent shell",
            "Type literal text and tmux keys (Enter, C-c, "
            "Tab, Up …) into a shell: REPLs, prompts, pagers, editors.",
            tools.send,
            read_only=False,
            output_schema=result,
        )
    )
    registry.add(
        _tool(
            "shell_read",
            "Read a persistent shell",
            "Read a shell (mode tail/screen/history/since/diff/"
            "summary, or search with paging), optionally after a wait (idle/bell/match/exit/foreground); "
            "subscribe/unsubscribe to new output.",
            tools.read,
            read_only=True,
            output_schema=result,
        )
    )
    registry.add(
        _tool(
            "shell_state",
            "List persistent shells",
            "List shells with state, owner, label, foreground "
            "command and cwd; filter by scope/sessions/label/fg/cwd/state/owner.",
            tools.state,
            read_only=True,
            output_schema=STATE_SCHEMA,
        )
    )
    registry.add_resource_source(ShellResources(tools.engine))
    if hints is not None:
        hints["tool:shell"] = HINT
    if closers is not None:
        closers.append(tools.aclose)
    return tools


__all__ = ["ShellTools", "register_shell_tools"]
