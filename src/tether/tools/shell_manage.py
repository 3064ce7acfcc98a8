"""``shell_manage`` (spec 003): every manage kind, wired to targets, dry runs and the result shape.

Invariant: which kinds address shells is fixed here, once:

- per shell (``SHELL_KINDS``: rename, resize, respawn, close, idle, snapshot) — the target resolves
  to live shells like any write: ``*`` refused, ``mine`` must name exactly one shell, else an id;
- a target as a *selection* (snapshot-list, workspace-save; the macro kinds use it for the
  ``shell`` scope) — one result for the task;
- no target (reap, doctor, vault-list, workspace-list/restore/delete) — an explicit ``target``
  with ids or ``*`` is refused, since it would be silently meaningless.

The result is the shell tools' summary-plus-blocks text and ``outcome_json``, each task's entry
extended with ``kind`` and kind-specific ``data`` (``MANAGE_SCHEMA``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.config import Config
from tether.errors import UsageError
from tether.shells.engine import SessionEngine
from tether.store.macros import MacroView
from tether.tools import shell_render
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult
from tether.tools.shell_args import input_schema, parse_manage
from tether.tools.shell_args_model import (
    Call,
    DoctorAction,
    ManageAction,
    Task,
    WorkspaceDeleteAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.tools.shell_exec import Unit, resolve_target, run_plain, run_units
from tether.tools.shell_manage_doctor import doctor
from tether.tools.shell_manage_home import (
    macro_kind,
    reap,
    vault_list,
    workspace_delete,
    workspace_list,
    workspace_restore,
    workspace_save,
)
from tether.tools.shell_manage_kinds import Done, shell_kind, snapshot_list
from tether.tools.shell_render import TaskOutcome

SHELL_KINDS = frozenset({"rename", "resize", "respawn", "close", "idle", "snapshot"})
SELECTION_KINDS = frozenset(
    {
        "snapshot-list",
        "workspace-save",
        "macro-set",
        "macro-rm",
        "macro-list",
        "macro-history",
        "macro-restore",
    }
)
NO_TARGET_KINDS = frozenset(
    {"reap", "doctor", "vault-list", "workspace-list", "workspace-restore", "workspace-delete"}
)

DESCRIPTION = (
    "Manage persistent shells: rename (newName), resize (cols/rows), respawn, close, idle (idleMinutes), "
    "snapshot, snapshot-list, reap (lost shells idle ≥10 min), doctor (note), macro-set/rm/list/history/"
    "restore, vault-list, workspace-save/list/restore/delete. safety.dryrun previews close, reap, macro-rm "
    "and workspace-delete."
)


def _manage_schema() -> dict[str, Any]:
    schema = copy.deepcopy(shell_render.RESULT_SCHEMA)
    props = schema["properties"]["tasks"]["items"]["properties"]
    props["kind"] = {"type": ["string", "null"], "description": "The action.kind of the task."}
    props["data"] = {
        "type": ["object", "null"],
        "description": "Kind-specific facts (snapshot, checks, macros, workspace, …); null on error.",
    }
    return schema


MANAGE_SCHEMA: dict[str, Any] = _manage_schema()
Key = tuple[int, str | None]


class ShellManage:
    """The ``shell_manage`` handler of one process."""

    def __init__(self, config: Config, engine: Callable[[], SessionEngine]) -> None:
        self.config = config
        self._engine = engine

    async def manage(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_manage(raw)
        engine = self._engine()
        for task in call.tasks:
            if task.action.kind in NO_TARGET_KINDS and task.target.mode != "mine":
                raise UsageError(
                    f"tasks[{task.index}].target: kind={task.action.kind} does not act on particular shells; "
                    "remove the target block"
                )
        done: dict[Key, Done] = {}
        per_shell = [t for t in call.tasks if t.action.kind in SHELL_KINDS]
        others = [t for t in call.tasks if t.action.kind not in SHELL_KINDS]
        outcomes: list[TaskOutcome] = []
        if per_shell:

            async def unit_work(unit: Unit) -> TaskOutcome:
                task = unit.task
                result = await shell_kind(engine, unit.shell_id, task.action, ctx.actor, task.safety.dryrun)
                done[(task.index, unit.shell_id)] = result
                return TaskOutcome(
                    index=task.index, shell=unit.shell_id, label=task.label, lines=result.lines
                )

            sub: Call[ManageAction] = replace(call, tasks=tuple(per_shell))
            outcomes += await run_units(engine, sub, ctx.actor, write=True, work=unit_work)
        if others:

            async def plain_work(task: Task[ManageAction]) -> Sequence[TaskOutcome]:
                shell, result = await self._home_kind(engine, task, ctx.actor)
                done[(task.index, shell)] = result
                return [TaskOutcome(index=task.index, shell=shell, label=task.label, lines=result.lines)]

            outcomes += await run_plain(replace(call, tasks=tuple(others)), plain_work)
        outcomes.sort(key=lambda o: (o.index, o.shell or ""))
        kinds = {t.index: t.action.kind for t in call.tasks}
        structured = shell_render.outcome_json(outcomes)
        for entry, o in zip(structured["tasks"], outcomes, strict=True):
            entry["kind"] = kinds[o.index]
            found = done.get((o.index, o.shell))
            entry["data"] = found.data if found is not None and o.ok else None
        notes = [n for n in (call.concurrency_note,) if n]
        return ToolResult(
            text=shell_render.render_result(outcomes, structured=True, notes=notes),
            structured=structured,
            is_error=bool(outcomes) and all(not o.ok for o in outcomes),
        )

    async def _home_kind(
        self, engine: SessionEngine, task: Task[ManageAction], actor: str
    ) -> tuple[str | None, Done]:
        """A kind without a per-shell fan-out; returns the shell it was about (if one) and its result."""
        action, dryrun, kind = task.action, task.safety.dryrun, task.action.kind
        path = f"tasks[{task.index}].target"
        if kind == "snapshot-list":
            return None, snapshot_list(engine, task.target, actor)
        if isinstance(action, WorkspaceSaveAction):
            ids = await resolve_target(engine, task.target, actor, write=False, path=path)
            return None, await workspace_save(engine, action, ids, actor)
        if kind.startswith("macro-"):
            shell = await self._macro_shell(engine, task, actor, path)
            view = MacroView(conversation=actor, shell=shell)
            return shell, macro_kind(engine, action, view, actor, dryrun)
        if kind == "reap":
            return None, await reap(engine, actor, dryrun)
        if isinstance(action, DoctorAction):
            return None, await doctor(engine, action.note, actor)
        if kind == "vault-list":
            return None, vault_list(self.config)
        if kind == "workspace-list":
            return None, workspace_list(engine)
        if isinstance(action, WorkspaceRestoreAction):
            return None, await workspace_restore(engine, action, actor)
        assert isinstance(action, WorkspaceDeleteAction)
        return None, workspace_delete(engine, action, dryrun)

    @staticmethod
    async def _macro_shell(
        engine: SessionEngine, task: Task[ManageAction], actor: str, path: str
    ) -> str | None:
        """The shell whose ``shell``-scope macros a macro kind sees: the one named, or the caller's
        only shell for ``mine``; ``None`` when ``mine`` is not exactly one shell."""
        target = task.target
        if target.mode == "*":
            raise UsageError(f"{path}.sessions='*': macro kinds look at one shell at most; give one id")
        if target.mode == "ids":
            if len(target.ids) != 1:
                raise UsageError(
                    f"{path}.sessions: macro kinds look at one shell at most; got {len(target.ids)}"
                )
            return (await resolve_target(engine, target, actor, write=False, path=path))[0]
        live = await engine.live()
        records = engine.records.shells()
        mine = [i for i in live if (rec := records.get(i)) is not None and rec.owner == actor]
        return mine[0] if len(mine) == 1 else None


def register_shell_manage(
    registry: ToolRegistry, *, config: Config, engine: Callable[[], SessionEngine]
) -> ShellManage:
    """Add ``shell_manage`` to ``registry`` (it shares the persistent-shell engine of the process)."""
    tool = ShellManage(config, engine)
    registry.add(
        ToolDef(
            name="shell_manage",
            title="Manage persistent shells",
            description=DESCRIPTION,
            input_schema=input_schema("shell_manage"),
            handler=tool.manage,
            output_schema=MANAGE_SCHEMA,
            read_only=False,
        )
    )
    return tool


__all__ = ["MANAGE_SCHEMA", "ShellManage", "register_shell_manage"]
