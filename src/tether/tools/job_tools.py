"""The model's view of the job table: ``job_list``, ``job_output``, ``job_kill``.

Invariant: a conversation sees and controls only the jobs it started (``CallContext.actor``);
the panel and the CLI see every job. ``job_output`` consumes: each call returns only output that
arrived since the previous call, so a model polling a promoted command never sees a line twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.errors import NotFoundError
from tether.jobs.registry import Job, JobInfo, JobRegistry
from tether.shell import sandbox_lines
from tether.shell.render import dropped_marker
from tether.tools.arguments import JsonInt, parse_arguments, shown
from tether.tools.bash import (
    SANDBOX_SCHEMA,
    SPILL_PATHS_SCHEMA,
    SUSPENDED_SCHEMA,
    sandbox_json,
    spill_paths,
    suspended_line,
)
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult

MAX_WAIT_MS = 600_000

_JOB_FIELDS: dict[str, Any] = {
    "jobId": {"type": "string"},
    "status": {"type": "string", "enum": ["starting", "running", "completed", "killed"]},
    "exitCode": {"type": ["integer", "null"]},
    "signal": {"type": ["string", "null"]},
    "stopped": {"type": ["string", "null"]},
    "suspended": SUSPENDED_SCHEMA,
}


class _JobOutputArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    job_id: str = Field(alias="jobId", min_length=1)
    # Above MAX_WAIT_MS is clamped (a wait budget), below 0 is refused.
    timeout_ms: JsonInt = Field(default=0, alias="timeoutMs", ge=0)


class _JobKillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    job_id: str = Field(alias="jobId", min_length=1)
    reason: str = Field(default="stopped by job_kill", max_length=500)


class _JobListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _own(registry: JobRegistry, job_id: str, ctx: CallContext) -> Job:
    job = registry.get(job_id)
    if ctx.source == "tool" and job.owner != ctx.actor:
        raise NotFoundError(f"no job {job_id!r} in this conversation; job_list shows yours")
    return job


def _status_line(info: JobInfo) -> str:
    if info.suspended:
        return suspended_line(info.job_id)
    if info.status in ("running", "starting"):
        return f"[job {info.job_id} still running]"
    parts = [f"job {info.job_id} {info.status}"]
    if info.stopped:
        parts.append(f"stopped: {info.stopped}")
    if info.signal:
        parts.append(f"killed by signal: {info.signal}")
    elif info.exit_code is not None:
        parts.append(f"exit code: {info.exit_code}")
    return "[" + "; ".join(parts) + "]"


def _job_fields(info: JobInfo) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "jobId": info.job_id,
        "status": info.status,
        "exitCode": info.exit_code,
        "signal": info.signal,
        "stopped": info.stopped,
    }
    if info.suspended:
        fields["suspended"] = True
    return fields


def job_list_tool(registry: JobRegistry) -> ToolDef:
    async def handler(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        parse_arguments("job_list", _JobListArgs, arguments)
        owner = ctx.actor if ctx.source == "tool" else None
        jobs = registry.list(owner)
        rows = [
            {**_job_fields(info), "command": info.command, "description": info.description} for info in jobs
        ]
        lines = [
            f"{info.job_id}  {'suspended' if info.suspended else info.status:<9}  "
            f"{info.description or info.command}"
            for info in jobs
        ]
        return ToolResult(text="\n".join(lines) or "(no jobs)", structured={"jobs": rows})

    return ToolDef(
        name="job_list",
        title="List background jobs",
        description="List this conversation's background jobs (commands moved to the background by "
        "bash/pwsh) with their status.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        output_schema={
            "type": "object",
            "properties": {
                "jobs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            **_JOB_FIELDS,
                            "command": {"type": "string"},
                            "description": {"type": "string"},
                        },
                        "required": ["jobId", "status", "command"],
                    },
                }
            },
            "required": ["jobs"],
        },
        handler=handler,
        read_only=True,
    )


def job_output_tool(registry: JobRegistry) -> ToolDef:
    async def handler(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("job_output", _JobOutputArgs, arguments)
        job = _own(registry, args.job_id, ctx)
        wait_ms = min(args.timeout_ms, MAX_WAIT_MS)
        read = await registry.read_waiting(args.job_id, wait_ms / 1000)
        # A confined job's report (what the sandbox denied, what it undid in repositories) is
        # ready once the job has ended, as a foreground result's is.
        ended = read.info.status in ("completed", "killed") and job.execution is not None
        sandbox = job.execution.sandbox if ended and job.execution is not None else None
        text = read.text
        if (marker := dropped_marker(read.dropped)) is not None:
            text = f"{marker}\n{text}"
        if wait_ms != args.timeout_ms:
            note = f"[timeoutMs {shown(args.timeout_ms)} clamped to {wait_ms}, the longest job_output waits]"
            text = f"{note}\n{text}"
        closing = "".join(f"{line}\n" for line in sandbox_lines(sandbox))
        rendered = (
            (text if text.endswith("\n") or not text else text + "\n") + closing + _status_line(read.info)
        )
        structured: dict[str, Any] = {
            **_job_fields(read.info),
            "output": read.text,
            "lossy": read.lossy,
        }
        if read.dropped:
            structured["spillPaths"] = spill_paths(read.dropped)
        if sandbox is not None:
            structured["sandbox"] = sandbox_json(sandbox)
        if wait_ms != args.timeout_ms:
            structured["requestedTimeoutMs"] = args.timeout_ms
        return ToolResult(text=rendered, structured=structured)

    return ToolDef(
        name="job_output",
        title="Read a background job's output",
        description="Return a background job's output that arrived since the last job_output call, its "
        "status and exit code. timeoutMs (0-600000, default 0; a larger value is clamped to 600000) waits "
        "up to that long for new output or for the job to end.",
        input_schema={
            "type": "object",
            "properties": {
                "jobId": {"type": "string", "description": "The job id, e.g. job-ab12cd."},
                "timeoutMs": {
                    "type": "integer",
                    "minimum": 0,
                    "description": f"Wait up to this long for new output or exit (default 0: return at "
                    f"once; at most {MAX_WAIT_MS}: a larger value is clamped to it).",
                },
            },
            "required": ["jobId"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                **_JOB_FIELDS,
                "output": {"type": "string"},
                "lossy": {"type": "boolean"},
                "spillPaths": SPILL_PATHS_SCHEMA,
                "sandbox": SANDBOX_SCHEMA,
                "requestedTimeoutMs": {
                    "type": "integer",
                    "description": f"Only when timeoutMs was above {MAX_WAIT_MS}: what was asked.",
                },
            },
            "required": ["jobId", "status", "output", "lossy"],
        },
        handler=handler,
    )


def job_kill_tool(registry: JobRegistry) -> ToolDef:
    async def handler(arguments: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("job_kill", _JobKillArgs, arguments)
        job = _own(registry, args.job_id, ctx)
        killed = registry.kill(args.job_id, args.reason.strip() or "stopped by job_kill")
        # A second job_kill during the first one's grace period: the job has not ended yet, so
        # this call waits for it too rather than saying "had already ended" of a running job.
        stopping = not killed and job.running
        if job.execution is not None and (killed or stopping):
            await job.execution.done
        info = job.info()
        verb = "stopped" if killed else "was already being stopped" if stopping else "had already ended"
        return ToolResult(
            text=f"job {info.job_id} {verb}; {_status_line(info)}",
            structured={**_job_fields(info), "killed": killed},
        )

    return ToolDef(
        name="job_kill",
        title="Stop a job",
        description="Stop a running job (a background job, or a bash/pwsh call still running in the "
        "foreground) and its whole process tree. The reason appears as [stopped: reason] in its result.",
        input_schema={
            "type": "object",
            "properties": {
                "jobId": {"type": "string", "description": "The job id, e.g. job-ab12cd."},
                "reason": {"type": "string", "maxLength": 500, "description": "Why it is stopped."},
            },
            "required": ["jobId"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {**_JOB_FIELDS, "killed": {"type": "boolean"}},
            "required": ["jobId", "status", "killed"],
        },
        handler=handler,
    )


def register_job_tools(tools: ToolRegistry, jobs: JobRegistry) -> None:
    for tool in (job_list_tool(jobs), job_output_tool(jobs), job_kill_tool(jobs)):
        tools.add(tool)


JOB_TOOL_NAMES = ("job_list", "job_output", "job_kill")
