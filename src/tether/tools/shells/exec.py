"""Running the tasks of one persistent-shell tool call: targets, fan-out, concurrency, outcomes.

Invariant: a call's targets are resolved (``shells.resolve_target``) before anything is typed,
and the whole call is refused (``UsageError``) if one shell would be touched twice or a write
names ``mine`` while this conversation owns several shells. Then every (task, shell) unit runs
under one semaphore of ``call.concurrency``; a unit's own failure becomes that unit's
``TaskOutcome`` (``error``), never the call's. ``ai-busy`` is set on a shell while a unit of
this process works on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tether.errors import NotFoundError, TetherError, UsageError
from tether.shells import HostError, Shells, resolve_target
from tether.tools.shells.args import Call, Task
from tether.tools.shells.render import TaskOutcome

A = TypeVar("A")


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    task: Task[Any]
    shell_id: str


async def plan_units(shells: Shells, call: Call[Any], actor: str, *, write: bool) -> list[Unit | TaskOutcome]:
    """Resolve every task; a task whose target cannot be resolved becomes an error outcome."""
    units: list[Unit | TaskOutcome] = []
    failed: list[Unit | TaskOutcome] = []
    seen: dict[str, int] = {}
    # Which shells live, not where they are; of the named shells only when every task names its
    # shells (the other shells of the home are not asked about).
    live = set(await shells.live(lean=True, only=named_shells(call)))
    for task in call.tasks:
        path = f"tasks[{task.index}].target"
        try:
            ids = await resolve_target(shells, task.target, actor, write=write, path=path, live=live)
        except (NotFoundError, HostError) as exc:
            failed.append(TaskOutcome.failed(task.index, task.label, exc))
            continue
        for shell_id in ids:
            if shell_id in seen:
                raise UsageError(
                    f"shell {shell_id} appears in tasks[{seen[shell_id]}] and tasks[{task.index}]: one shell "
                    "may be operated on only once per call; split it into separate calls"
                )
            seen[shell_id] = task.index
            units.append(Unit(task=task, shell_id=shell_id))
    return [*units, *failed]


def named_shells(call: Call[Any]) -> list[str] | None:
    """The shells the call's tasks name, when every task names its shells by id (else ``None``:
    ``mine`` and ``*`` need the whole listing)."""
    if not all(task.target.mode == "ids" for task in call.tasks):
        return None
    return [shell_id for task in call.tasks for shell_id in task.target.ids]


async def run_units(
    shells: Shells,
    call: Call[Any],
    actor: str,
    *,
    write: bool,
    work: Callable[[Unit], Awaitable[TaskOutcome]],
) -> list[TaskOutcome]:
    planned = await plan_units(shells, call, actor, write=write)
    units = [u for u in planned if isinstance(u, Unit)]
    outcomes: list[TaskOutcome] = [o for o in planned if isinstance(o, TaskOutcome)]
    gate = asyncio.Semaphore(call.concurrency)

    async def one(unit: Unit) -> TaskOutcome:
        async with gate:
            busy = shells.ai_busy.setdefault(unit.shell_id, set())
            busy.add(actor)
            try:
                return await work(unit)
            except TetherError as exc:
                # tmux's "can't find pane" when the shell was closed under the task is said as such
                told = await shells.closed_meanwhile(unit.shell_id, exc)
                return TaskOutcome.failed(unit.task.index, unit.task.label, told, shell=unit.shell_id)
            finally:
                busy.discard(actor)
                if not busy and shells.ai_busy.get(unit.shell_id) is busy:
                    del shells.ai_busy[unit.shell_id]  # only shells with a call on them are kept

    if len(units) == 1:  # the usual call: no task of its own, and one pass of the loop less
        outcomes.append(await one(units[0]))
    else:
        outcomes.extend(await asyncio.gather(*(one(u) for u in units)))
    return sorted(outcomes, key=lambda o: (o.index, o.shell or ""))


async def run_plain(
    call: Call[Any], work: Callable[[Task[Any]], Awaitable[Sequence[TaskOutcome]]]
) -> list[TaskOutcome]:
    """Tasks without a target (``shell_open``), still under the call's concurrency."""
    gate = asyncio.Semaphore(call.concurrency)

    async def one(task: Task[Any]) -> Sequence[TaskOutcome]:
        async with gate:
            try:
                return await work(task)
            except TetherError as exc:
                return [TaskOutcome.failed(task.index, task.label, exc)]

    results = await asyncio.gather(*(one(t) for t in call.tasks))
    return [o for group in results for o in group]
