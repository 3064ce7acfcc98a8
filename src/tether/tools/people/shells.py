"""People-only tools on shells: manual locks, the recorded shells, timelines, outputs, recordings.

Invariant: these are the doors the panel and the CLI use instead of the store (``ToolDef.
people_only``: no MCP conversation lists or calls them). Handlers translate: arguments are checked
with pydantic (``parse_arguments``), the work is the shells face's or the store's own, and every
call is audited once by the registry's middleware with the action and shell these tools name
(``audit_fields``). Text that comes from a shell (commands, outputs, recordings) is masked by the
middleware; a recording is also masked as one stream before it is cut into events.

    shell_lock      lock / unlock a shell by hand (who, reason); agents are refused while it holds
    shell_records   every recorded shell with owner, label, lock state and start directory (no tmux needed)
    shell_timeline  a shell's commands: text, author (its client; a person's name when noted),
                    start, duration, exit code
    shell_output    the rendered output of one log range (a command's whole output)
    shell_record    the shell's output with timing, as an asciicast v2 recording
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import NotFoundError
from tether.shells import (
    SecretRedactor,
    Shells,
    asciicast,
    check_shell_id,
    command_output,
    retention,
    session_exists,
    timeline,
    window_size,
)
from tether.store.locks import ShellLocks
from tether.store.manual_locks import ManualLock, utc_text
from tether.tools.arguments import parse_arguments
from tether.tools.conversations import client_names
from tether.tools.registry import AuditFields, CallContext, ToolDef, ToolRegistry, ToolResult

MAX_OUTPUT_LINES = 100_000


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LockArgs(_Args):
    shell: str
    action: Literal["lock", "unlock"]
    who: str | None = Field(default=None, description="who holds the lock (default: the caller)")
    reason: str = ""


class ShellArgs(_Args):
    shell: str


class TimelineArgs(_Args):
    shell: str
    limit: int = Field(default=200, ge=1, le=10_000)


class OutputArgs(_Args):
    shell: str
    start: int = Field(ge=0)
    end: int | None = Field(default=None, ge=0)
    lines: int = Field(default=MAX_OUTPUT_LINES, ge=1, le=MAX_OUTPUT_LINES)


def lock_json(lock: ManualLock | None) -> dict[str, Any] | None:
    if lock is None:
        return None
    return {"who": lock.who, "sinceMs": lock.since_ms, "reason": lock.why, "source": lock.source}


def author_kind(actor: str) -> str:
    """``conversation`` / ``panel`` / ``cli`` / ``person`` (typed at a terminal) for an author."""
    return actor if actor in ("panel", "cli", "person") else "conversation"


class PeopleShellTools:
    """The handlers; ``shells`` is the process's ``Shells`` (hooks installed) on the running loop."""

    def __init__(self, shells: Callable[[], Shells], redactor: SecretRedactor) -> None:
        self._shells = shells
        self._redactor = redactor

    def _known(self, shells: Shells, shell_id: str) -> str:
        check_shell_id(shell_id)
        if shells.records.any_shell(shell_id) is None:
            raise NotFoundError(
                f"no shell {shell_id} is recorded in this TETHER_HOME"
                f"{retention.unknown_note(shells.store, shells.config.sessions.keep_closed_days)}; the "
                "panel and `tether shell list` show the shells there are"
            )
        return shell_id

    async def lock(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("shell_lock", LockArgs, raw)
        shells = self._shells()
        locks = ShellLocks(shells.home, shells.store)
        shell_id = check_shell_id(args.shell)
        if args.action == "lock":
            self._known(shells, shell_id)
            if shells.records.shell(shell_id) is None:
                # A lock nothing could see or lift from the panel, guarding nothing: a closed shell
                # takes no command (a revived one is another shell, with its own id).
                raise NotFoundError(
                    f"shell {shell_id} is closed: it takes no commands, so there is nothing to lock; "
                    "`tether shell list` and the panel show the open shells"
                )
            who = args.who if args.who is not None else (ctx.who or ctx.actor)
            held, created = locks.manual.lock(shell_id, who=who, why=args.reason, source=ctx.source)
            since = utc_text(held.since_ms)
            if created:
                text = (
                    f"{shell_id} locked by {held.who} since {since}; agents are refused until "
                    f"`tether shell unlock {shell_id}` or Unlock in the panel"
                )
            else:
                why = f" ({held.why})" if held.why else ""
                text = f"{shell_id} was already locked by {held.who} since {since}{why}; nothing changed"
            return ToolResult(
                text=text,
                structured={"shell": shell_id, "locked": True, "changed": created, "lock": lock_json(held)},
            )
        was = locks.manual.unlock(shell_id)
        if was is None:
            text = f"{shell_id} was not locked; nothing changed"
        else:
            text = f"{shell_id} unlocked (it was locked by {was.who} since {utc_text(was.since_ms)})"
        return ToolResult(
            text=text,
            structured={
                "shell": shell_id,
                "locked": False,
                "changed": was is not None,
                "lock": lock_json(was),
            },
        )

    async def records(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        parse_arguments("shell_records", _Args, raw)
        shells = self._shells()
        locks = ShellLocks(shells.home, shells.store)
        recorded = sorted(shells.records.shells().values(), key=lambda r: r.created_ms)
        clients = client_names(shells.store, (rec.owner for rec in recorded))
        rows = []
        for rec in recorded:
            state = locks.lock_state(rec.id)
            rows.append(
                {
                    "id": rec.id,
                    "owner": rec.owner,
                    "client": clients.get(rec.owner),
                    "label": rec.label,
                    "cwd": rec.cwd,
                    "host": rec.host,
                    "createdMs": rec.created_ms,
                    "lastActivityMs": rec.last_activity_ms,
                    "idleMinutes": rec.idle_minutes,
                    "lockedBy": state.manual.who if state.manual else None,
                    "lockedSinceMs": state.manual.since_ms if state.manual else None,
                    "lockReason": state.manual.why if state.manual else None,
                    "writer": state.holder.actor if state.holder else None,
                }
            )
        return ToolResult(text=f"{len(rows)} recorded shell(s)", structured={"shells": rows})

    async def timeline(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("shell_timeline", TimelineArgs, raw)
        shells = self._shells()
        shell_id = self._known(shells, args.shell)
        entries = []
        # A line without text that was no run is tether's own re-install of the integration (it
        # removes itself from history): nobody's command.
        listed = [e for e in timeline(shells, shell_id, limit=args.limit) if e.text or e.run_id]
        clients = client_names(shells.store, (e.by for e in listed))
        for i, e in enumerate(listed):
            started = round(e.started_at * 1000) if e.started_at is not None else None
            ended = round(e.ended_at * 1000) if e.ended_at is not None else None
            entries.append(
                {
                    "index": i,
                    "text": e.text,
                    "by": e.by,
                    "authorKind": author_kind(e.by),
                    "typist": e.typist,
                    "client": clients.get(e.by),
                    "runId": e.run_id,
                    "startedMs": started,
                    "endedMs": ended,
                    "durationMs": ended - started if started is not None and ended is not None else None,
                    "exitCode": e.exit_code,
                    "outputStart": e.output_start,
                    "outputEnd": e.output_end,
                }
            )
        lines = [_timeline_line(x) for x in entries]
        return ToolResult(
            text="\n".join([f"{len(entries)} command(s) in {shell_id}", *lines]),
            structured={"shell": shell_id, "commands": entries},
        )

    async def output(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("shell_output", OutputArgs, raw)
        shells = self._shells()
        shell_id = self._known(shells, args.shell)
        got = await anyio.to_thread.run_sync(
            lambda: command_output(shells, shell_id, args.start, args.end, args.lines)
        )
        return ToolResult(
            text="\n".join(got.lines),
            structured={
                "shell": shell_id,
                "lines": list(got.lines),
                "total": got.total,
                "dropped": got.dropped,
            },
        )

    async def record(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("shell_record", ShellArgs, raw)
        shells = self._shells()
        shell_id = self._known(shells, args.shell)
        rec = shells.record(shell_id)
        width, height = 80, 24
        if await session_exists(shells, shell_id):  # a closed shell's log is still there; its size is not
            # Asked now: a person's terminal may have resized the window since the last listing.
            cols, rows = await window_size(shells, shell_id)
            width, height = cols or width, rows or height
        label = rec.label if rec is not None and rec.label else shell_id
        title = f"{shell_id} {label}" if label != shell_id else shell_id
        masker = self._redactor.masker()
        # A whole log is read twice (events, then bytes): off the event loop.
        cast = await anyio.to_thread.run_sync(
            lambda: asciicast(shells, shell_id, masker=masker, width=width, height=height, title=title)
        )
        return ToolResult(
            text=(
                f"recording of {shell_id}: {cast.events} output events, {cast.duration_s:.1f} s, "
                f"{cast.bytes} bytes of output (asciicast v2 in structuredContent.cast)"
            ),
            structured={
                "shell": shell_id,
                "cast": cast.text,
                "events": cast.events,
                "durationS": cast.duration_s,
                "bytes": cast.bytes,
            },
        )


def _timeline_line(e: Mapping[str, Any]) -> str:
    code = "running" if e["endedMs"] is None else f"exit={e['exitCode']}"
    aside = e["client"] or e["typist"]  # an agent's client; who pressed Enter on a person's line
    who = e["by"] + (f" ({aside})" if aside else "")
    started = utc_text(e["startedMs"]) if e["startedMs"] is not None else "?"
    took = f" {e['durationMs']} ms" if e["durationMs"] is not None else ""
    return f"{started}{took} {code} by {who}: {e['text']}"


def _shell_fields(action: str) -> Callable[[Mapping[str, Any]], AuditFields]:
    def fields(arguments: Mapping[str, Any]) -> AuditFields:
        shell = arguments.get("shell")
        targets = (shell,) if isinstance(shell, str) and shell else ()
        return AuditFields(action=action, targets=targets)

    return fields


def _lock_fields(arguments: Mapping[str, Any]) -> AuditFields:
    action = arguments.get("action")
    shell = arguments.get("shell")
    reason = arguments.get("reason")
    return AuditFields(
        action=action if action in ("lock", "unlock") else "lock",
        targets=(shell,) if isinstance(shell, str) and shell else (),
        reason=reason.strip() or None if isinstance(reason, str) and action == "lock" else None,
    )


def _people_tool(
    name: str,
    title: str,
    description: str,
    handler: Callable[[Mapping[str, Any], CallContext], Any],
    model: type[BaseModel],
    fields: Callable[[Mapping[str, Any]], AuditFields],
    *,
    read_only: bool,
) -> ToolDef:
    return ToolDef(
        name=name,
        title=title,
        description=description,
        input_schema=model.model_json_schema(),
        handler=handler,
        read_only=read_only,
        people_only=True,
        audit_fields=fields,
    )


def register_people_shell_tools(
    registry: ToolRegistry, *, shells: Callable[[], Shells], redactor: SecretRedactor
) -> PeopleShellTools:
    tools = PeopleShellTools(shells, redactor)
    for tool in (
        _people_tool(
            "shell_lock",
            "Lock or unlock a shell by hand",
            "A person reserves a shell: every agent write is refused until it is unlocked.",
            tools.lock,
            LockArgs,
            _lock_fields,
            read_only=False,
        ),
        _people_tool(
            "shell_records",
            "The recorded shells",
            "Every recorded shell with owner, label, lock state and the directory it started in (cwd).",
            tools.records,
            _Args,
            lambda _a: AuditFields(action="list"),
            read_only=True,
        ),
        _people_tool(
            "shell_timeline",
            "A shell's commands",
            "Every command a shell ran (agent's or person's): author, start, duration, exit code.",
            tools.timeline,
            TimelineArgs,
            _shell_fields("timeline"),
            read_only=True,
        ),
        _people_tool(
            "shell_output",
            "A command's output",
            "The rendered output of a log range of a shell (a command's whole output).",
            tools.output,
            OutputArgs,
            _shell_fields("output"),
            read_only=True,
        ),
        _people_tool(
            "shell_record",
            "A shell's recording",
            "The shell's whole output with timing as an asciicast v2 recording (vault values masked).",
            tools.record,
            ShellArgs,
            _shell_fields("record"),
            read_only=True,
        ),
    ):
        registry.add(tool)
    return tools
