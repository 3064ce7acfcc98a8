"""The ``shell_audit`` tool: read the audit log back (spec 003, ``shell_audit.audit``).

Invariant: a task returns the newest ``output.lines`` records (0–2000, default 20) that match
*all* its filters, oldest first (newest last) — never more, and never a record outside the
window of ``days`` (rolling, × 24 h). With ``export: true`` the lines are the raw JSONL records
exactly as stored (each still verifiable against its hash). Reading never changes the log; each
call then appends one record of its own (``tool=shell_audit``, ``action=audit``, the filters in
``extra``), after the query, so a call never sees itself.

Which records ``target`` selects (a record's ``targets`` are the shell ids it acted on):

- explicit ids: records that name any of them — live or long closed;
- ``*``: every record;
- ``mine`` (the default): records made by this conversation, plus records that name a shell this
  conversation owns (whoever made them).

The log is read with ``tether.audit.export`` — newest file first, from its end, stopping once the
page is full — once per selected shell, and the pages are merged by chain position (``seq``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tether.audit import AuditLog, AuditRecord, export
from tether.errors import TetherError
from tether.shells import Records
from tether.store.db import Store
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult
from tether.tools.shells import render
from tether.tools.shells.args import AuditAction, Task, input_schema, parse_audit
from tether.tools.shells.render import TaskOutcome

DESCRIPTION = (
    "Read the audit log: who did what to which shell, newest last. action.kind=audit with actor "
    "(conversation id, panel, cli), source (tool/panel/host/cli), days (1-3650, default 1), export (raw "
    "JSONL); target.sessions narrows to shells (default mine: this conversation's records and shells; "
    "'*' = all); output.lines caps the records (default 20, max 2000)."
)

_RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seq": {"type": "integer"},
        "time": {"type": "string"},
        "actor": {"type": "string"},
        "source": {"type": "string"},
        "tool": {"type": "string"},
        "action": {"type": "string"},
        "targets": {"type": "array", "items": {"type": "string"}},
        "command": {"type": ["string", "null"]},
        "outcome": {"type": "string"},
        "detail": {"type": "string"},
        "reason": {"type": ["string", "null"]},
        "flags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["seq", "time", "actor", "source", "tool", "action", "targets", "outcome"],
}
_TASK_SCHEMA = render.RESULT_SCHEMA["properties"]["tasks"]["items"]
AUDIT_SCHEMA: dict[str, Any] = {
    **render.RESULT_SCHEMA,
    "properties": {
        **render.RESULT_SCHEMA["properties"],
        "tasks": {
            "type": "array",
            "items": {
                **_TASK_SCHEMA,
                "properties": {
                    **_TASK_SCHEMA["properties"],
                    "count": {"type": "integer", "description": "Records returned."},
                    "export": {"type": "boolean", "description": "true: lines are raw JSONL records."},
                    "filters": {"type": "object", "description": "The filters applied."},
                    "records": {"type": "array", "items": _RECORD_SCHEMA},
                },
            },
        },
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Query:
    actor: str | None
    source: str | None
    shell: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Page:
    filters: dict[str, Any]
    lines: list[str]
    records: list[AuditRecord]


class ShellAuditTool:
    """The handler; ``owned_shells(actor)`` lists the shells a conversation owns (for ``mine``)."""

    def __init__(
        self,
        home: Path,
        *,
        audit_calls: bool = True,
        owned_shells: Callable[[str], list[str]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.home = home
        self.audit_calls = audit_calls
        self._owned = owned_shells or self._owned_from_records
        self._clock = clock
        self._store: Store | None = None

    def _owned_from_records(self, actor: str) -> list[str]:
        if self._store is None:
            self._store = Store.open(self.home)
        return sorted(i for i, rec in Records(self._store).shells().items() if rec.owner == actor)

    async def __call__(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_audit(raw)
        limiter = anyio.CapacityLimiter(call.concurrency)
        outcomes: list[TaskOutcome | None] = [None] * len(call.tasks)
        extras: list[dict[str, Any]] = [{} for _ in call.tasks]

        async def one(i: int, task: Task[AuditAction]) -> None:
            try:
                page = await anyio.to_thread.run_sync(self._page, task, ctx.actor, limiter=limiter)
            except TetherError as exc:
                outcomes[i] = TaskOutcome(index=task.index, label=task.label, error=exc.message)
                return
            outcomes[i] = TaskOutcome(index=task.index, label=task.label, lines=tuple(page.lines))
            extras[i] = {
                "count": len(page.records),
                "export": task.action.export,
                "filters": page.filters,
                "records": [_record_json(r) for r in page.records],
            }

        async with anyio.create_task_group() as tg:
            for i, task in enumerate(call.tasks):
                tg.start_soon(one, i, task)
        done = [o for o in outcomes if o is not None]
        structured = render.outcome_json(done, notes=call.notes)
        for item, extra in zip(structured["tasks"], extras, strict=True):
            item.update(extra)
        result = ToolResult(
            text=render.render_result(done, notes=call.notes),
            structured=structured,
            is_error=all(not o.ok for o in done),
        )
        if self.audit_calls:
            await anyio.to_thread.run_sync(self._log_call, ctx, call.tasks, done, extras)
        return result

    # ---- one task -------------------------------------------------------------------------

    def _page(self, task: Task[AuditAction], me: str) -> _Page:
        a, target, limit = task.action, task.target, task.output.lines
        filters: dict[str, Any] = {
            "actor": a.actor,
            "source": a.source,
            "days": a.days,
            "target": ",".join(target.ids) if target.mode == "ids" else target.mode,
            "limit": limit,
        }
        if limit == 0:
            return _Page(filters=filters, lines=["0 records (output.lines=0)"], records=[])
        queries = self._queries(a, target.mode, target.ids, me)
        found: dict[str, tuple[str, AuditRecord]] = {}
        for q in queries:
            for line in export(
                self.home,
                actor=q.actor,
                source=q.source,
                days=a.days,
                limit=limit,
                shell=q.shell,
                clock=self._clock,
            ):
                record = AuditRecord.from_dict(json.loads(line))
                found[record.hash] = (line, record)
        page = sorted(found.values(), key=lambda item: item[1].seq)[-limit:]
        records = [r for _line, r in page]
        if a.export:  # nothing but the stored lines, so the text is valid JSONL as it stands
            return _Page(filters=filters, lines=[line for line, _r in page], records=records)
        head = _header(len(records), filters)
        return _Page(filters=filters, lines=[head, *(_record_line(r) for r in records)], records=records)

    def _queries(self, a: AuditAction, mode: str, ids: tuple[str, ...], me: str) -> list[_Query]:
        if mode == "*":
            return [_Query(actor=a.actor, source=a.source, shell=None)]
        if mode == "ids":
            return [_Query(actor=a.actor, source=a.source, shell=i) for i in ids]
        # mine: this conversation's records, plus any record naming a shell it owns.
        queries: list[_Query] = []
        if a.actor is None or a.actor == me:
            queries.append(_Query(actor=me, source=a.source, shell=None))
        if a.actor != me:
            queries.extend(_Query(actor=a.actor, source=a.source, shell=s) for s in self._owned(me))
        return queries

    # ---- auditing the call ----------------------------------------------------------------

    def _log_call(
        self,
        ctx: CallContext,
        tasks: tuple[Task[AuditAction], ...],
        outcomes: list[TaskOutcome],
        extras: list[dict[str, Any]],
    ) -> None:
        targets = sorted({i for t in tasks for i in t.target.ids})
        failed = [o for o in outcomes if not o.ok]
        AuditLog(self.home).append(
            actor=ctx.actor,
            source=ctx.source,
            tool="shell_audit",
            action="audit",
            targets=targets,
            outcome="error" if failed and len(failed) == len(outcomes) else "ok",
            detail="; ".join(f"tasks[{o.index}]: {o.error}" for o in failed),
            extra={"tasks": [e.get("filters", {}) for e in extras]},
        )


def _header(count: int, filters: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in filters.items() if v is not None and k != "limit")
    noun = "record" if count == 1 else "records"
    return f"{count} {noun} ({shown}; at most {filters['limit']}), newest last"


def _record_line(r: AuditRecord) -> str:
    parts = [r.time, f"#{r.seq}", r.actor, f"({r.source})", f"{r.tool}.{r.action}"]
    if r.targets:
        parts.append(",".join(r.targets))
    parts.append(r.outcome)
    if r.command is not None:
        # json.dumps keeps a command with newlines on one line, visibly.
        parts.append("$ " + json.dumps(r.command, ensure_ascii=False))
    if r.reason:
        parts.append("reason=" + json.dumps(r.reason, ensure_ascii=False))
    if r.flags:
        parts.append("[" + ",".join(r.flags) + "]")
    if r.detail:
        parts.append("— " + r.detail.replace("\n", " "))
    return " ".join(parts)


def _record_json(r: AuditRecord) -> dict[str, Any]:
    data = r.to_dict()
    return {k: data[k] for k in _RECORD_SCHEMA["properties"]}


def register_shell_audit(
    registry: ToolRegistry,
    *,
    home: Path,
    audit_calls: bool = True,
    owned_shells: Callable[[str], list[str]] | None = None,
) -> ShellAuditTool:
    """Add ``shell_audit`` to ``registry``. ``audit_calls=False`` when a wrapper already logs calls."""
    tool = ShellAuditTool(home, audit_calls=audit_calls, owned_shells=owned_shells)
    registry.add(
        ToolDef(
            name="shell_audit",
            title="Read the audit log",
            description=DESCRIPTION,
            input_schema=input_schema("shell_audit"),
            handler=tool,
            output_schema=AUDIT_SCHEMA,
            read_only=True,
        )
    )
    return tool


__all__ = ["AUDIT_SCHEMA", "ShellAuditTool", "register_shell_audit"]
