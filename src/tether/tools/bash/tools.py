"""The model-visible ``bash`` and ``pwsh`` tools (spec 000 "模型可见的工具").

Invariants this module owns:

- The schema is exactly the spec's: ``command`` and ``description`` required; ``timeoutMs`` and
  ``workdir``; ``sandbox_permissions`` + ``justification`` only when the executor is confining;
  ``run_in_background`` only when ``enable_run_in_background`` is on *and* a job registry is
  attached. ``stdout_max_bytes`` never appears. Attaching or detaching the job registry swaps the
  definition in the ``ToolRegistry`` (the schema hot-switch), which front doors announce.
- A foreground command is started in the job table while it runs, so ``job_kill`` from elsewhere
  stops it and its result says ``stopped``. If the table is full (``max_live``) the call still
  runs, under the executor's own kill deadline (never promoted), and an ``internal/error`` event is
  logged; it is still entered in the table past the bound, so it is never a command that
  ``job_list`` cannot show or ``job_kill`` cannot stop.
- With ``promote_on_timeout`` and a job table, a command still running at its deadline becomes a
  background job; its answer is seeded by one consuming read, so ``job_output`` continues exactly
  after it. Otherwise the deadline kills it (``timedOut``).
- Caller cancellation kills the process tree and ends the call with ``ToolAborted``
  (TOOL_ABORTED), never with output text. Non-zero exits are results, rendered in-band.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from tether.config import Config
from tether.errors import TetherError, UsageError
from tether.jobs.registry import Job, JobLimitError, JobRegistry
from tether.shell.env_registry import ShellEnvRegistry
from tether.shell.local import LocalBashExecutor, LocalPwshExecutor
from tether.shell.options import LocalShellOptions, discover_pwsh
from tether.shell.render import dropped_marker, render_shell_result
from tether.shell.sandbox import sandbox_executor
from tether.shell.types import (
    AbortSignal,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
    ShellExecutor,
    ShellExpiryPolicy,
)
from tether.tools.arguments import JsonInt, parse_arguments, shown
from tether.tools.bash import results as shapes
from tether.tools.bash.schema import (
    DEFAULT_SANDBOX_MODES,
    HINTS,
    ShellName,
    shell_description,
    shell_input_schema,
)
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellToolOptions:
    """Spec 000 ShellToolOptions."""

    enable_run_in_background: bool = True
    promote_on_timeout: bool = True


class _ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False)
    command: str = Field(min_length=1)
    description: str = Field(min_length=1)
    timeout_ms: JsonInt | None = Field(default=None, alias="timeoutMs")
    workdir: str | None = None
    run_in_background: bool | None = None
    sandbox_permissions: str | None = None
    justification: str | None = None


def _pwsh_explicit(config: Config) -> str | None:
    return (config.shell.executable or None) if config.shell.provider == "pwsh" else None


def pwsh_available(config: Config) -> bool:
    """Whether a PowerShell executable resolves by the spec's discovery chain."""
    return shutil.which(discover_pwsh(_pwsh_explicit(config))) is not None


def make_executor(
    config: Config, shell: ShellName, *, env_registry: ShellEnvRegistry | None = None
) -> ShellExecutor:
    """The local executor behind one shell tool, with the deployment's ``[shell]`` defaults and
    ``env_registry`` (the catalog's one, shared by both tools; a new one when None). Its commands
    see ``config.home`` as ``$TETHER_HOME``, the home they run for, whatever this process's own
    environment says (a program may name another home: ``tether.Tether(home=…)``)."""
    options = LocalShellOptions.from_config(config)
    # TETHER_HOME in the command is the home this configuration belongs to, as with `tether exec`
    # (not $TETHER_HOME, which a library caller's load_config(home) may not be).
    env_registry = env_registry or ShellEnvRegistry(home=config.home)
    if config.shell.provider == "sandbox":
        # Both tools are confined: asking for the sandbox never leaves one shell unconfined.
        opts = dataclasses.replace(options, executable=None) if shell == "pwsh" else options
        return sandbox_executor(config, shell=shell, options=opts, env_registry=env_registry)
    if shell == "pwsh":
        options = dataclasses.replace(options, executable=_pwsh_explicit(config))
        return LocalPwshExecutor(options, env_registry=env_registry)
    if config.shell.provider == "pwsh":
        options = dataclasses.replace(options, executable=None)
    return LocalBashExecutor(options, env_registry=env_registry)


class ShellToolPlugin:
    """One shell tool (``bash`` or ``pwsh``) bound to an executor and the process's tool registry."""

    def __init__(
        self,
        *,
        shell: ShellName,
        executor: ShellExecutor,
        tools: ToolRegistry,
        options: ShellToolOptions | None = None,
        default_timeout_ms: int = 120_000,
        max_timeout_ms: int = 600_000,
        grace_ms: int = 3_000,
    ) -> None:
        self.shell = shell
        self.executor = executor
        self.tools = tools
        self.options = options or ShellToolOptions()
        # The default a call gets is capped like any other value (resolve): the schema says so.
        self.default_timeout_ms = min(default_timeout_ms, max_timeout_ms)
        self.max_timeout_ms = max_timeout_ms
        self.grace_ms = grace_ms
        self.jobs: JobRegistry | None = None
        self.hint = HINTS[shell]
        self._definitions: dict[tuple[bool, bool], ToolDef] = {}
        self.tools.add(self._definition())

    # -- schema -------------------------------------------------------------------------------

    @property
    def background_offered(self) -> bool:
        return self.options.enable_run_in_background and self.jobs is not None

    @property
    def sandbox_modes(self) -> tuple[str, ...]:
        modes = getattr(self.executor, "permission_modes", DEFAULT_SANDBOX_MODES)
        return tuple(modes)

    @property
    def current_sandbox_mode(self) -> str:
        return str(getattr(self.executor, "default_permissions", self.sandbox_modes[0]))

    def set_job_registry(self, jobs: JobRegistry | None) -> None:
        """Attach (or detach with None) the job table; swaps the published definition."""
        self.jobs = jobs
        self.tools.add(self._definition())

    def _definition(self) -> ToolDef:
        # The schema depends on exactly these two facts; re-adding an unchanged definition is a no-op.
        key = (self.background_offered, self.jobs is not None)
        if key not in self._definitions:
            self._definitions[key] = ToolDef(
                name=self.shell,
                title="Run a PowerShell command" if self.shell == "pwsh" else "Run a bash command",
                description=self._description(),
                input_schema=self.input_schema(),
                output_schema=shapes.OUTPUT_SCHEMA,
                handler=self.call,
            )
        return self._definitions[key]

    def _description(self) -> str:
        # A confining executor explains its policy and permission values to the model.
        policy = getattr(self.executor, "sandbox_hint", None) if self.executor.confining else None
        text = shell_description(self.shell)
        return f"{text}\n\n{policy}" if isinstance(policy, str) and policy else text

    def input_schema(self) -> dict[str, Any]:
        return shell_input_schema(
            default_timeout_ms=self.default_timeout_ms,
            max_timeout_ms=self.max_timeout_ms,
            promotes=self.options.promote_on_timeout and self.jobs is not None,
            sandbox_modes=self.sandbox_modes if self.executor.confining else None,
            current_sandbox_mode=self.current_sandbox_mode,
            background=self.background_offered,
        )

    # -- validation ---------------------------------------------------------------------------

    def _parse(self, arguments: Mapping[str, Any]) -> _ShellArgs:
        published = self._definition().input_schema["properties"]
        args = parse_arguments(self.shell, _ShellArgs, arguments, fields=tuple(published))
        if not args.command.strip():
            raise UsageError(f"{self.shell}: field 'command' is blank; give the command text to run")
        if not args.description.strip():
            raise UsageError(f"{self.shell}: field 'description' is blank; say in one sentence what it does")
        for name, value in (("command", args.command), ("workdir", args.workdir)):
            # The kernel takes argv and paths as C strings: a NUL cannot reach the process.
            if value is not None and "\0" in value:
                raise UsageError(
                    f"{self.shell}: field {name!r} contains a NUL byte (\\u0000) at character "
                    f"{value.index(chr(0))}; allowed: text without NUL (the operating system cannot "
                    "pass one to a process); remove it (a command can still print one: printf '\\0')"
                )
        # Above the maximum is clamped by resolve (and reported); below 1 means nothing.
        if args.timeout_ms is not None and args.timeout_ms < 1:
            raise UsageError(
                f"{self.shell}: field 'timeoutMs' is {shown(args.timeout_ms)}; "
                "allowed: 1 millisecond or more "
                f"(a value above {self.max_timeout_ms}, [shell].max_timeout_ms, is clamped to it); "
                "omit it for the default"
            )
        self._check_sandbox(args)
        return args

    def _check_sandbox(self, args: _ShellArgs) -> None:
        given = [name for name in ("sandbox_permissions", "justification") if getattr(args, name) is not None]
        if not self.executor.confining:
            if given:
                raise UsageError(
                    f"{self.shell}: unknown field {given[0]!r}: commands run unconfined in this deployment, "
                    "so there are no sandbox permissions to request"
                )
            return
        mode = (args.sandbox_permissions or "").strip()
        if mode and mode not in self.sandbox_modes:
            raise UsageError(
                f"{self.shell}: field 'sandbox_permissions' is {mode!r}; "
                f"allowed: {', '.join(self.sandbox_modes)}"
            )
        if not mode or mode == self.current_sandbox_mode:
            return  # same mode or blank counts as not given
        widening = self.sandbox_modes.index(mode) > self.sandbox_modes.index(self.current_sandbox_mode)
        if widening and not (args.justification or "").strip():
            raise UsageError(
                f"{self.shell}: field 'sandbox_permissions' asks for {mode!r}, wider than "
                f"{self.current_sandbox_mode!r}; give a non-empty 'justification' saying why"
            )

    def _request(self, args: _ShellArgs, ctx: CallContext, on_expiry: ShellExpiryPolicy) -> ShellExecRequest:
        request = ShellExecRequest(
            args.command,
            workdir=args.workdir,
            timeout_ms=args.timeout_ms,
            on_expiry=on_expiry,
            session_id=ctx.actor,
        )
        mode = (args.sandbox_permissions or "").strip()
        if self.executor.confining and mode and mode != self.current_sandbox_mode:
            # The executor enforces (and audits) the request; the tool only validated its shape.
            request = dataclasses.replace(
                request, sandbox_permissions=mode, justification=(args.justification or "").strip() or None
            )
        return request

    # -- calls --------------------------------------------------------------------------------

    async def call(self, arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = self._parse(arguments)
        if args.run_in_background:
            if not self.options.enable_run_in_background:
                return ToolResult(text=shapes.DISABLED_TEXT, is_error=True)
            if self.jobs is None:
                return ToolResult(text=shapes.UNAVAILABLE_TEXT, is_error=True)
            return await self._background(args, ctx, self.jobs)
        return await self._foreground(args, ctx)

    async def _authorized(self, request: ShellExecRequest, ctx: CallContext) -> ShellExecRequest:
        """A wider sandbox mode granted by configuration or a person (the executor asks), or refused."""
        authorize = getattr(self.executor, "authorize", None)
        if authorize is None or request.sandbox_permissions is None:
            return request
        granted: ShellExecRequest = await authorize(request, person=ctx.person)
        return granted

    async def _background(self, args: _ShellArgs, ctx: CallContext, jobs: JobRegistry) -> ToolResult:
        # A background job has no deadline: the caller's timeoutMs is not one either. Passed on,
        # it only bounded the preparation, so a small value settled the job as timed out before
        # it ever ran; the deployment's default bounds the preparation instead.
        request = dataclasses.replace(self._request(args, ctx, ShellExpiryPolicy.NONE), timeout_ms=None)
        request = await self._authorized(request, ctx)
        job = jobs.reserve(command=args.command, description=args.description, owner=ctx.actor)
        try:
            spec = self.executor.resolve(request)
            execution = await self.executor.execute(spec)
            if execution.pid is None:
                # It never started: a spawn refused is the SHELL_SPAWN a foreground call gets
                # (result() raises it), not the id of a job that only ever says "killed".
                await execution.result()
        except BaseException:
            jobs.release(job)
            raise
        job.background = True
        job.attach(execution)
        return ToolResult(
            text=shapes.background_text(job.job_id, timeout_ignored=args.timeout_ms is not None),
            structured=shapes.background(job_id=job.job_id),
        )

    async def _admit(self, args: _ShellArgs, ctx: CallContext) -> tuple[Job | None, bool]:
        """The call's entry in the job table, and whether it may become a background job."""
        if self.jobs is None:
            return None, False
        try:
            job = self.jobs.reserve(command=args.command, description=args.description, owner=ctx.actor)
            return job, True
        except JobLimitError as exc:
            # Not a failure of the call: it runs under the executor's deadline, never promoted (that
            # would be one job more than the bound), and is entered past the bound all the same,
            # so job_list shows it and job_kill stops it like any other.
            job = self.jobs.reserve(
                command=args.command, description=args.description, owner=ctx.actor, bounded=False
            )
            message = f"{exc}; {job.job_id} runs in the foreground under its deadline, not promoted"
            logger.warning("internal/error: job admission refused for a %s call: %s", self.shell, message)
            if ctx.notifier is not None:
                try:
                    await ctx.notifier.log(
                        "warning", "internal/error", {"event": "job_admission", "message": message}
                    )
                except BaseException:
                    self.jobs.release(job)  # cancelled before anything ran: no entry left behind
                    raise
            return job, False

    async def _foreground(self, args: _ShellArgs, ctx: CallContext) -> ToolResult:
        request = await self._authorized(self._request(args, ctx, ShellExpiryPolicy.KILL), ctx)
        job, promotable = await self._admit(args, ctx)
        promote = job is not None and promotable and self.options.promote_on_timeout
        expiry = ShellExpiryPolicy.NONE if promote else ShellExpiryPolicy.KILL
        abort = AbortSignal()
        try:
            spec = self.executor.resolve(dataclasses.replace(request, on_expiry=expiry))
            execution = await self.executor.execute(spec, abort=abort)
        except BaseException:
            if job is not None and self.jobs is not None:
                self.jobs.release(job)
            raise
        if job is not None:
            job.attach(execution)
        try:
            if promote and job is not None and not await self._settles_in_time(execution, spec):
                return self._promote(job, execution, spec.timeout_ms, self._clamped(args, spec))
            result = await execution.result()
        except anyio.get_cancelled_exc_class() as exc:
            await self._kill_for_cancel(abort, execution)
            self._forget(job)
            raise shapes.ToolAborted() from exc
        except BaseException:
            self._forget(job)
            raise
        self._forget(job)
        if result.aborted:
            raise shapes.ToolAborted(abort.reason or "the command was aborted")
        stopped = job.stop_reason if job is not None else None
        clamped = self._clamped(args, spec)
        rendered = shapes.with_clamp_note(
            render_shell_result(result, stopped=stopped),
            requested_timeout_ms=clamped,
            used_ms=spec.timeout_ms,
        )
        value = shapes.foreground(result, stopped=stopped, requested_timeout_ms=clamped)
        return ToolResult(text=rendered, structured=value)

    @staticmethod
    def _clamped(args: _ShellArgs, spec: ShellExecSpec) -> int | None:
        """The caller's ``timeoutMs`` when resolve capped it, else None."""
        if args.timeout_ms is not None and args.timeout_ms != spec.timeout_ms:
            return args.timeout_ms
        return None

    async def _settles_in_time(self, execution: ShellExecution, spec: ShellExecSpec) -> bool:
        # The deadline counts from resolve (spec: time before spawn counts against timeoutMs).
        remaining = spec.timeout_ms / 1000 - (time.monotonic() - spec.resolved_at)
        with anyio.move_on_after(max(remaining, 0.0)):
            await execution.done
        return execution.done.is_set()

    def _promote(
        self, job: Job, execution: ShellExecution, timeout_ms: int, requested_timeout_ms: int | None
    ) -> ToolResult:
        job.background = True
        seed = execution.read_output()
        output = seed.text
        if (marker := dropped_marker(seed.dropped)) is not None:
            output = f"{marker}\n{output}"
        suspended = execution.suspended
        value = shapes.promoted(
            job_id=job.job_id,
            timeout_ms=timeout_ms,
            output=output,
            requested_timeout_ms=requested_timeout_ms,
            dropped=seed.dropped,
            suspended=suspended,
        )
        logger.info("%s command promoted to background job %s after %dms", self.shell, job.job_id, timeout_ms)
        text = shapes.with_clamp_note(
            shapes.promoted_text(output, timeout_ms=timeout_ms, job_id=job.job_id, suspended=suspended),
            requested_timeout_ms=requested_timeout_ms,
            used_ms=timeout_ms,
        )
        return ToolResult(text=text, structured=value)

    async def _kill_for_cancel(self, abort: AbortSignal, execution: ShellExecution) -> None:
        abort.fire("cancelled by the caller")
        execution.kill("cancelled by the caller")
        # Shielded: the caller is gone, but the tree must be dead before this call ends.
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.grace_ms / 1000 + 5):
            await execution.done

    def _forget(self, job: Job | None) -> None:
        if job is not None and self.jobs is not None:
            # Evicted or removed by someone else meanwhile: nothing left to forget.
            with contextlib.suppress(TetherError):
                self.jobs.remove(job.job_id)
