"""The persistent-shell tools ``shell_open``, ``shell_run``, ``shell_send``, ``shell_read``,
``shell_state`` (spec 003), registered into a ``ToolRegistry`` by ``register_shell_tools``.

Invariant: handlers translate, nothing more: arguments come only from ``args`` (validated
dataclasses), text only from ``render``, shell work only from the ``tether.shells`` face.
Every task tool returns the summary-plus-blocks text (or plain text) and the same facts as
``structuredContent`` matching ``render.RESULT_SCHEMA``. Where the deployment confines,
``shell_open`` takes ``sandbox_permissions`` + ``justification`` and opens the shell only under a
mode the escalation gate granted (``tether.shell.sandbox.grants``: configuration, else a person).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from tether.approvals import Approvals
from tether.audit.log import AuditLog
from tether.config import Config
from tether.errors import UsageError
from tether.home import current_directory
from tether.shell import PERMISSION_MODES, SandboxSettings
from tether.shell.sandbox import EscalationGate
from tether.shells import (
    DEFAULT_OPEN_COLS,
    DEFAULT_OPEN_ROWS,
    NOT_READY,
    Confinement,
    HostError,
    SessionHooks,
    Shells,
    Write,
    budget,
    check_capacity,
    fit,
    keep_retention,
    open_shell,
    read,
    retry,
    revive,
    run,
    sandbox_of,
    send,
    steps,
)
from tether.store.workspaces import MAX_LABEL_CHARS
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult
from tether.tools.shells import render
from tether.tools.shells.args import (
    Call,
    OpenAction,
    ReadAction,
    RetryAction,
    RunAction,
    SendAction,
    StepsAction,
    SubscribeAction,
    Task,
    input_schema,
    named_in,
    parse_open,
    parse_read,
    parse_run,
    parse_send,
    parse_state,
)
from tether.tools.shells.exec import Unit, run_plain, run_units
from tether.tools.shells.render import TaskOutcome
from tether.tools.shells.state import STATE_SCHEMA, shell_state
from tether.tools.shells.subscriptions import ShellResources, Subscriptions, shell_uri

CONFINED_HINT = (
    "Every shell runs in the sandbox for its whole life (its directory writable, no network, no Unix "
    "sockets, tether's state hidden); a run's result ends with `[sandbox denied: …]` when something was "
    "refused. For more, open a new shell with sandbox_permissions and a justification: granted by the "
    "deployment's configuration or by the user."
)
HINT = """Persistent shells (tmux) that keep state between calls. Open one with shell_open, run
commands with shell_run (wait.kind exit gives the exit code; the result says run=<id>), type into
programs (REPLs, prompts, less, vim) with shell_send (text, then keys such as ["Enter"] or ["C-c"]),
read with shell_read (mode tail/screen/history/since/diff/summary, or search), list with shell_state.
Every call is { tasks: [ { target, action, wait, output, safety } ] }. Do not operate on shells
other conversations created unless the user asks. `exit` in shell_run ends the shell itself."""


def numbered_label(base: str, n: int) -> str:
    """The label of the ``n``-th shell of a batch opened with ``label=base``: ``base-n``, with the
    base cut so the whole is still a label (≤ 32 characters, spec 003 ``open.label``), which
    rename, workspaces and the panel require of every shell's label."""
    suffix = f"-{n}"
    return base[: MAX_LABEL_CHARS - len(suffix)].rstrip() + suffix


class ShellTools:
    """The tool handlers plus the per-process state they share (shells, subscriptions)."""

    def __init__(self, config: Config, *, hooks_for: Callable[[Shells], SessionHooks] | None = None) -> None:
        self.config = config
        self.subscriptions = Subscriptions()
        self._hooks_for = hooks_for
        self._hooked: Shells | None = None
        self.confining = config.shell.provider == "sandbox"
        self._gate: EscalationGate | None = None
        self._keeper: asyncio.Task[None] | None = None

    def expect_listing(self, arguments: Any = None) -> None:
        """A call that begins by listing the live shells arrives (``ToolDef.expect``): of the
        shells it names, when every task names its shells (``exec.named_shells`` of the parsed
        call then asks for the same ones)."""
        self.shells().expect_listing(named_in(arguments))

    def shells(self) -> Shells:
        shells = Shells.get(self.config)
        # The safety hooks (locks, guard, macros, vault) go on each Shells before its first write.
        if self._hooks_for is not None and shells is not self._hooked:
            shells.hooks = self._hooks_for(shells)
            self._hooked = shells
        return shells

    async def end_conversation(self, actor: str) -> None:
        """The conversation's MCP session closed: its subscriptions stop (its shells stay)."""
        await self.subscriptions.end_actor(actor)

    def start_sweeps(self) -> None:
        """A server starts (``tether mcp``, ``tether serve``, the command line's tools process):
        retention of closed shells runs a second later and then at the idle sweep's interval, also
        in a process whose calls never open a shell (``keep_retention``: it starts nothing, no
        ``Shells`` nor tmux client); else a home whose servers no longer open shells kept its
        expired ones for ever."""
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(keep_retention(self.config))

    async def aclose(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        await self.subscriptions.close()
        await Shells.close_home(self.config.home)

    def _result(self, call: Call[Any], outcomes: list[TaskOutcome], structured: bool) -> ToolResult:
        notes = call.notes
        limit = budget(self.shells())
        # An outcome within the budget is kept as it is (a dataclass ``replace`` costs ~8 µs a shell).
        outcomes = [
            o if (lines := fit(o.lines, limit)) == o.lines else replace(o, lines=lines) for o in outcomes
        ]
        text = render.render_result(outcomes, structured=structured, notes=notes)
        return ToolResult(
            text=text,
            structured=render.outcome_json(outcomes, notes=notes),
            is_error=bool(outcomes) and all(not o.ok for o in outcomes),
        )

    # ---- shell_open -----------------------------------------------------------------------

    def _escalations(self) -> EscalationGate:
        if self._gate is None:
            home = self.config.home
            approvals = Approvals(home, timeout_s=self.config.approvals.timeout_s)
            settings = SandboxSettings.from_config(self.config)
            self._gate = EscalationGate(settings, audit=AuditLog(home), approvals=approvals)
        return self._gate

    async def _confinement(self, task: Task[OpenAction], ctx: CallContext) -> Confinement | None:
        """The sandbox the task's shells open under: the deployment's default, or a wider mode
        the gate granted (``None``: unconfined, where the deployment does not confine)."""
        a, path = task.action, f"tasks[{task.index}].action"
        given = [name for name in ("sandbox_permissions", "justification") if getattr(a, name) is not None]
        if not self.confining:
            if given:
                raise UsageError(
                    f"{path}: unknown field {given[0]!r}: shells run unconfined in this deployment, so "
                    "there are no sandbox permissions to request"
                )
            return None
        if a.sandbox_permissions in (None, "use_default"):
            return None  # the deployment's default
        # A blank justification is the gate's to refuse: refused there, it is audited too.
        fix = "give cwd an absolute directory, or set [shell].cwd in config.toml"
        cwd = a.cwd or self.config.shell.cwd or current_directory(fix)
        many = f"{a.count} persistent shells" if a.count > 1 else "a persistent shell"
        gate = self._escalations()
        grant = await gate.grant(
            mode=a.sandbox_permissions,
            justification=a.justification,
            tool="shell_open",
            subject=f"open {many} in {cwd}",
            command=f"shell_open cwd={cwd} count={a.count}",
            asker=ctx.actor,
            targets=[cwd],
            person=ctx.person,
        )
        return Confinement(
            mode=grant.mode,
            settings=gate.settings,
            granted_by=grant.granted_by,
            justification=(a.justification or "").strip(),
        )

    async def open(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_open(raw)
        shells = self.shells()
        await check_capacity(shells, sum(t.action.count for t in call.tasks))
        gate = asyncio.Semaphore(call.concurrency)

        async def one(task: Task[OpenAction]) -> list[TaskOutcome]:
            a = task.action
            confinement = await self._confinement(task, ctx)
            if a.from_id is not None:
                async with gate:
                    path = f"tasks[{task.index}].action"
                    try:
                        shell_id, lines = await revive(shells, a, ctx.actor, path, confinement=confinement)
                    except HostError as exc:
                        if exc.shell is None:
                            raise
                        return [TaskOutcome.failed(task.index, task.label, exc, shell=exc.shell)]
                return [TaskOutcome(index=task.index, shell=shell_id, label=task.label, lines=tuple(lines))]

            async def make(n: int) -> TaskOutcome:
                async with gate:
                    label = a.label or ""
                    if label and a.count > 1:
                        label = numbered_label(label, n + 1)
                    try:
                        rec, reached = await open_shell(
                            shells,
                            owner=ctx.actor,
                            label=label,
                            cwd=a.cwd,
                            cols=DEFAULT_OPEN_COLS if a.cols is None else a.cols,
                            rows=DEFAULT_OPEN_ROWS if a.rows is None else a.rows,
                            idle_minutes=a.idle_minutes,
                            confinement=confinement,
                            host_name=a.host or "local",
                        )
                    except HostError as exc:
                        if exc.shell is None:
                            raise
                        # Cut short with the shell recorded on the host: the agent gets its id.
                        return TaskOutcome.failed(task.index, task.label, exc, shell=exc.shell)
                    where = "" if rec.host == "local" else f" on host {rec.host}"
                    lines = [
                        f"opened {rec.id}{where} label={rec.label} cwd={rec.cwd}",
                        *sandbox_note(shells, rec.id),
                    ]
                    if not reached:
                        lines.append(NOT_READY)
                    if a.watch and ctx.notifier is not None:
                        self.subscriptions.subscribe(shells, ctx.actor, rec.id, ctx.notifier)
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
        shells = self.shells()

        async def work(unit: Unit) -> TaskOutcome:
            task = unit.task
            w = Write(
                shell_id=unit.shell_id,
                actor=ctx.actor,
                wait=task.wait,
                output=task.output,
                safety=task.safety,
                person=ctx.person,
            )
            action = task.action
            if isinstance(action, RunAction):
                outcome = await run(shells, w, action.command)
            elif isinstance(action, StepsAction):
                outcome = await steps(shells, w, action)
            else:
                assert isinstance(action, RetryAction)
                outcome = await retry(shells, w, action)
            return TaskOutcome.of(task.index, task.label, outcome)

        outcomes = await run_units(shells, call, ctx.actor, write=True, work=work)
        structured = all(t.output.structured for t in call.tasks)
        return self._result(call, outcomes, structured)

    async def send(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_send(raw)
        shells = self.shells()

        async def work(unit: Unit) -> TaskOutcome:
            task = unit.task
            assert isinstance(task.action, SendAction)
            w = Write(
                shell_id=unit.shell_id,
                actor=ctx.actor,
                wait=task.wait,
                output=task.output,
                safety=task.safety,
                person=ctx.person,
            )
            return TaskOutcome.of(task.index, task.label, await send(shells, w, task.action))

        outcomes = await run_units(shells, call, ctx.actor, write=True, work=work)
        return self._result(call, outcomes, True)

    # ---- shell_read -----------------------------------------------------------------------

    async def read(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_read(raw)
        shells = self.shells()

        async def work(unit: Unit) -> TaskOutcome:
            task, shell_id = unit.task, unit.shell_id
            action = task.action
            if isinstance(action, SubscribeAction):
                if ctx.notifier is None:
                    raise UsageError("subscribe needs a connection that can receive notifications (MCP)")
                await shells.pane(shell_id)
                new = self.subscriptions.subscribe(shells, ctx.actor, shell_id, ctx.notifier)
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
            outcome = await read(
                shells, shell_id, action, task.wait, task.output, ctx.actor, path=f"tasks[{task.index}]"
            )
            if action.regex is not None:  # a search page keeps its head (its header says where next)
                outcome = replace(outcome, lines=fit(outcome.lines, budget(shells), keep="head"))
            return TaskOutcome.of(task.index, task.label, outcome)

        outcomes = await run_units(shells, call, ctx.actor, write=False, work=work)
        return self._result(call, outcomes, True)

    # ---- shell_state ----------------------------------------------------------------------

    async def state(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        return await shell_state(self.shells(), parse_state(raw), ctx.actor)


def sandbox_note(shells: Shells, shell_id: str) -> list[str]:
    """How a new shell is confined, in one line (nothing for an unconfined deployment)."""
    summary = sandbox_of(shells, shells.host_of(shell_id), shell_id, shells.records.shell(shell_id))
    return [] if summary is None else [f"[sandbox: {summary}]"]


def _write(unit: Unit, actor: str) -> Write:
    t = unit.task
    return Write(shell_id=unit.shell_id, actor=actor, wait=t.wait, output=t.output, safety=t.safety)


def _tool(
    name: str,
    title: str,
    description: str,
    handler: Callable[[Mapping[str, Any], CallContext], Awaitable[ToolResult]],
    *,
    read_only: bool,
    output_schema: dict[str, Any],
    expect: Callable[[Any], None] | None = None,
) -> ToolDef:
    return ToolDef(
        name=name,
        title=title,
        description=description,
        input_schema=input_schema(name),
        handler=handler,
        output_schema=output_schema,
        read_only=read_only,
        expect=expect,
    )


def register_shell_tools(
    registry: ToolRegistry,
    *,
    config: Config,
    hints: dict[str, str] | None = None,
    closers: list[Callable[[], Awaitable[None]]] | None = None,
    hooks_for: Callable[[Shells], SessionHooks] | None = None,
) -> ShellTools:
    """Add the five tools and the per-shell resources to ``registry``; ``hooks_for`` builds the
    ``SessionHooks`` (the safety path) installed on every ``Shells`` the tools use."""
    tools = ShellTools(config, hooks_for=hooks_for)
    result = render.RESULT_SCHEMA
    registry.add(
        ToolDef(
            name="shell_open",
            title="Open persistent shells",
            description="Open persistent tmux shells (action.kind=open: "
            "count, cwd, label, cols, rows, idleMinutes, watch, from"
            + (", sandbox_permissions, justification). " + CONFINED_HINT if tools.confining else ")."),
            input_schema=input_schema(
                "shell_open", sandbox_modes=PERMISSION_MODES if tools.confining else None
            ),
            handler=tools.open,
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
            expect=tools.expect_listing,
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
            expect=tools.expect_listing,
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
            expect=tools.expect_listing,
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
    registry.add_resource_source(ShellResources(tools.shells))
    if hints is not None:
        hints["tool:shell"] = HINT
    if closers is not None:
        closers.append(tools.aclose)
    return tools


__all__ = ["ShellTools", "register_shell_tools"]
