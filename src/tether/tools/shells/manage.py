"""``shell_manage`` (spec 003): the manage kinds wired to targets, dry runs and the result shape.

Invariant: translation only. Per-shell kinds (``shells.SHELL_KINDS``) fan out over their targets
like any write (``*`` refused, ``mine`` must name exactly one shell, else an id); the others run
once per task (``shells.manage_home``), and a kind that acts on no particular shell refuses an
explicit target, since it would be silently meaningless. The result is the shell tools'
summary-plus-blocks text and ``outcome_json``, each task's entry extended with ``kind`` and
kind-specific ``data`` (``MANAGE_SCHEMA``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.config import Config
from tether.errors import UsageError
from tether.shells import NO_TARGET_KINDS, SHELL_KINDS, Done, Shells, budget, fit, manage_home, shell_kind
from tether.tools.registry import CallContext, ToolDef, ToolRegistry, ToolResult
from tether.tools.shells import render
from tether.tools.shells.args import Call, ManageAction, Task, input_schema, parse_manage
from tether.tools.shells.exec import Unit, run_plain, run_units
from tether.tools.shells.render import TaskOutcome

DESCRIPTION = (
    "Manage persistent shells: rename (newName), resize (cols/rows), respawn, close, idle (idleMinutes), "
    "snapshot, snapshot-list, reap (lost shells idle ≥10 min), doctor (note), macro-set/rm/list/history/"
    "restore, vault-list, workspace-save/list/restore/delete. safety.dryrun previews close, reap, macro-rm "
    "and workspace-delete."
)


def _manage_schema() -> dict[str, Any]:
    schema = copy.deepcopy(render.RESULT_SCHEMA)
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

    def __init__(self, config: Config, shells: Callable[[], Shells]) -> None:
        self.config = config
        self._shells = shells

    async def manage(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        call = parse_manage(raw)
        shells = self._shells()
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
                result = await shell_kind(shells, unit.shell_id, task.action, ctx.actor, task.safety.dryrun)
                done[(task.index, unit.shell_id)] = result
                return TaskOutcome(
                    index=task.index, shell=unit.shell_id, label=task.label, lines=result.lines
                )

            sub: Call[ManageAction] = replace(call, tasks=tuple(per_shell))
            outcomes += await run_units(shells, sub, ctx.actor, write=True, work=unit_work)
        if others:

            async def plain_work(task: Task[ManageAction]) -> Sequence[TaskOutcome]:
                shell, result = await manage_home(
                    shells,
                    self.config,
                    task.action,
                    task.target,
                    ctx.actor,
                    dryrun=task.safety.dryrun,
                    path=f"tasks[{task.index}].target",
                )
                done[(task.index, shell)] = result
                return [TaskOutcome(index=task.index, shell=shell, label=task.label, lines=result.lines)]

            outcomes += await run_plain(replace(call, tasks=tuple(others)), plain_work)
        outcomes.sort(key=lambda o: (o.index, o.shell or ""))
        limit = budget(shells)
        outcomes = [replace(o, lines=fit(o.lines, limit)) for o in outcomes]
        kinds = {t.index: t.action.kind for t in call.tasks}
        structured = render.outcome_json(outcomes, notes=call.notes)
        for entry, o in zip(structured["tasks"], outcomes, strict=True):
            entry["kind"] = kinds[o.index]
            found = done.get((o.index, o.shell))
            entry["data"] = found.data if found is not None and o.ok else None
        return ToolResult(
            text=render.render_result(outcomes, structured=True, notes=call.notes),
            structured=structured,
            is_error=bool(outcomes) and all(not o.ok for o in outcomes),
        )


def register_shell_manage(
    registry: ToolRegistry, *, config: Config, shells: Callable[[], Shells]
) -> ShellManage:
    """Add ``shell_manage`` to ``registry`` (it shares the persistent-shell engine of the process)."""
    tool = ShellManage(config, shells)
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
