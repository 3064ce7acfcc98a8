"""The per-shell ``shell_manage`` kinds (rename, resize, respawn, close, idle, snapshot), the
``snapshot-list`` listing and ``shell_open from`` (reviving a snapshot).

Invariant: a kind that changes a shell first checks for a person's manual lock (``REFUSED`` at
once for an agent; the panel and the CLI act on shells their person locked); ``close`` under
``dryrun`` reads only. Each function returns one ``Done``: the task's text
lines plus the same facts as JSON ``data`` for ``structuredContent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.audit import AuditLog
from tether.errors import NotFoundError, RefusedError
from tether.shells import lifecycle, retention
from tether.shells.domain import Shells
from tether.shells.host import Leftovers
from tether.shells.hosts import Confinement, default_confinement
from tether.shells.requests import (
    CloseAction,
    IdleAction,
    ManageAction,
    OpenAction,
    RenameAction,
    ResizeAction,
    Target,
)
from tether.shells.safety.call_notes import note_outcome
from tether.store.manual_locks import ManualLocks, utc_text
from tether.store.snapshots import Snapshot

NOT_READY = (
    "[the shell has not shown its first prompt yet (its start-up files still run); commands typed "
    "now wait for it]"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    lines: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)


def audit_note(shells: Shells, *, actor: str, action: str, note: str, targets: tuple[str, ...] = ()) -> int:
    """Write a caller's ``note`` (doctor, macro-set) into the audit log as its own record, masked
    like every record; returns its ``seq``. The call itself is audited by the tool middleware."""
    log = AuditLog(shells.home, redact=lifecycle.redactor(shells))
    return log.append(
        actor=actor, source="tool", tool="shell_manage", action=action, targets=targets, detail=note
    ).seq


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    return {
        "shell": snap.shell_id,
        "takenMs": snap.taken_ms,
        "taken": utc_text(snap.taken_ms),
        "reason": snap.reason,
        "label": snap.label,
        "cwd": snap.cwd,
        "cols": snap.cols,
        "rows": snap.rows,
        "bytes": snap.size,
        "droppedBytes": snap.dropped_bytes,
    }


def left_lines(shell_id: str, left: Leftovers) -> tuple[str, ...]:
    """The text line of what a close or a respawn could not end (none when nothing is left); the
    call's audit record says it too."""
    if not left:
        return ()
    note_outcome(shell_id, "ok", left.text())
    return (left.text(),)


def left_json(left: Leftovers) -> dict[str, Any]:
    """``stillRunning``: the processes a close or a respawn could not end (``pid``, ``command``),
    and ``notEnded`` why the host could not be asked to (a remote host gone), only when so."""
    data: dict[str, Any] = {"stillRunning": [{"pid": p.pid, "command": p.command} for p in left.processes]}
    if left.unknown:
        data["notEnded"] = left.unknown
    return data


def snapshot_line(snap: Snapshot) -> str:
    return (
        f"snapshot {snap.shell_id} at {snap.taken_ms} ({utc_text(snap.taken_ms)}) reason={snap.reason} "
        f"label={snap.label} cwd={snap.cwd} {snap.cols}x{snap.rows} scrollback={snap.size} bytes"
    )


async def shell_kind(shells: Shells, shell_id: str, action: ManageAction, actor: str, dryrun: bool) -> Done:
    """One per-shell kind on one live shell."""
    if not (isinstance(action, CloseAction) and dryrun):
        try:
            ManualLocks(shells.store).check(shell_id, actor=actor)
        except RefusedError as exc:
            note_outcome(shell_id, "refused", exc.message)
            raise
    _, pane = await shells.pane(shell_id, output=False)
    if isinstance(action, RenameAction):
        rec = lifecycle.record(shells, shell_id)
        label = lifecycle.check_label(action.new_name, "action.newName")
        lifecycle.set_label(shells, shell_id, label)
        snap = lifecycle.take_snapshot(shells, shell_id, reason="rename", actor=actor, pane=pane)
        return Done(
            lines=(f"renamed {rec.label} → {label}", snapshot_line(snap)),
            data={"label": label, "previousLabel": rec.label, "snapshot": snapshot_json(snap)},
        )
    if isinstance(action, ResizeAction):
        cols = action.cols if action.cols is not None else pane.cols
        rows = action.rows if action.rows is not None else pane.rows
        fresh = await lifecycle.resize(shells, shell_id, cols, rows)
        snap = lifecycle.take_snapshot(shells, shell_id, reason="resize", actor=actor, pane=fresh)
        return Done(
            lines=(f"resized {pane.cols}x{pane.rows} → {fresh.cols}x{fresh.rows}", snapshot_line(snap)),
            data={
                "cols": fresh.cols,
                "rows": fresh.rows,
                "previous": {"cols": pane.cols, "rows": pane.rows},
                "snapshot": snapshot_json(snap),
            },
        )
    if isinstance(action, CloseAction):
        if dryrun:
            note_outcome(shell_id, "dry-run")
            return Done(
                lines=(
                    f"dryrun: would snapshot (label, cwd {pane.cwd}, {pane.cols}x{pane.rows}, scrollback) "
                    f"and close {shell_id}; nothing was done",
                ),
                data={"dryrun": True, "wouldClose": [shell_id]},
            )
        closed = await lifecycle.close(shells, shell_id, actor=actor)
        snap, left = closed.snapshot, closed.left
        return Done(
            lines=(
                f"closed {shell_id}",
                *left_lines(shell_id, left),
                snapshot_line(snap),
                f"revive it with shell_open from={shell_id}",
            ),
            data={"closed": [shell_id], "snapshot": snapshot_json(snap), **left_json(left)},
        )
    if isinstance(action, IdleAction):
        lifecycle.record(shells, shell_id)
        lifecycle.set_idle_minutes(shells, shell_id, action.idle_minutes)
        n = action.idle_minutes
        text = "never closed for idleness" if n == 0 else f"closed after {n} idle minutes (snapshot first)"
        return Done(lines=(f"idleMinutes={n}: {shell_id} is {text}",), data={"idleMinutes": n})
    if action.kind == "snapshot":
        snap = lifecycle.take_snapshot(shells, shell_id, reason="manual", actor=actor, pane=pane)
        return Done(lines=(snapshot_line(snap),), data={"snapshot": snapshot_json(snap)})
    known = shells.records.shells().get(shell_id)
    respawned = await lifecycle.respawn(
        shells, shell_id, pane.cwd or (known.cwd if known is not None else None)
    )
    fresh, left = respawned.pane, respawned.left
    return Done(
        lines=(
            f"respawned {shell_id}: new shell process {fresh.pid} in {fresh.cwd}",
            *left_lines(shell_id, left),
        ),
        data={"pid": fresh.pid, "cwd": fresh.cwd, **left_json(left)},
    )


def snapshot_list(shells: Shells, target: Target, actor: str) -> Done:
    """Snapshots of named shells (alive or closed), of every shell this conversation opened
    (``mine``), or of every shell (``*``); newest first per shell."""
    if target.mode == "ids":
        ids = list(target.ids)
    elif target.mode == "mine":
        ids = [
            r["id"] for r in shells.store.query("SELECT id FROM shells WHERE owner = ? ORDER BY id", (actor,))
        ]
    else:
        ids = [
            r["shell_id"] for r in shells.store.query("SELECT DISTINCT shell_id FROM snapshots ORDER BY 1")
        ]
    store = lifecycle.snapshots(shells)
    snaps = [s for shell_id in ids for s in store.list(shell_id)]
    lines = [snapshot_line(s) for s in snaps] or [
        "no snapshots; close, idle reclaim, resize and rename take one, or shell_manage kind=snapshot"
    ]
    return Done(lines=tuple(lines), data={"snapshots": [snapshot_json(s) for s in snaps]})


async def revive(
    shells: Shells, action: OpenAction, actor: str, path: str, *, confinement: Confinement | None = None
) -> tuple[str, list[str]]:
    """``shell_open from``: a new shell from the latest snapshot of ``action.from_id``. A shell that
    was confined is revived confined (the default mode: a wider one is granted anew, never
    inherited), whether or not this deployment confines."""
    old = action.from_id
    assert old is not None
    if confinement is None:
        confinement = shells.default_confinement() or _was_confined(shells, old)
    store = lifecycle.snapshots(shells)
    snap = store.latest(old)
    if snap is None:
        keep_days = shells.config.sessions.keep_closed_days
        if shells.records.any_shell(old) is None and retention.removed_any(shells.store):
            raise NotFoundError(f"{path}.from: {retention.gone_text(old, keep_days)}")
        raise NotFoundError(
            f"{path}.from: no snapshot of {old} exists; close, idle reclaim, resize, rename and "
            "shell_manage kind=snapshot take one (list them with shell_manage kind=snapshot-list)"
        )
    text = store.read_text(snap)
    notes: list[str] = []
    # Where the old shell ran, unless the action names a host (or that host is gone from config).
    old_host = shells.records.host_of(old)
    name = action.host or (old_host if old_host in shells.hosts else "local")
    host = shells.check_host(name, f"{path}.host")
    cwd = action.cwd or snap.cwd
    # A size given with from wins over the snapshot's, as label and cwd do.
    cols = action.cols if action.cols is not None else snap.cols
    rows = action.rows if action.rows is not None else snap.rows
    if not action.cwd and not (cwd and await host.start_dir(cwd)):
        notes.append(f"[the snapshot's cwd {cwd} no longer exists; the new shell starts in the default]")
        cwd = ""
    rec, reached = await lifecycle.open_shell(
        shells,
        owner=actor,
        label=action.label or snap.label,
        cwd=cwd or None,
        cols=cols,
        rows=rows,
        idle_minutes=action.idle_minutes,
        preamble=lambda new_id: lifecycle.preamble(snap, text, new_id),
        confinement=confinement,
        host_name=host.name,
    )
    lines = [
        f"opened {rec.id}{'' if host.name == 'local' else ' on host ' + host.name} label={rec.label} "
        f"cwd={rec.cwd} {cols}x{rows}, revived from {old} "
        f"(snapshot '{snap.reason}' of {utc_text(snap.taken_ms)})",
        f"the old scrollback ({snap.size} bytes) is at the start of {rec.id}'s history: "
        "shell_read mode=history, mode=since or search",
        *notes,
    ]
    if not reached:
        lines.append(NOT_READY)
    return rec.id, lines


def _was_confined(shells: Shells, old: str) -> Confinement | None:
    rec = shells.records.any_shell(old)
    was = Confinement.from_json(rec.confinement) if rec is not None else None
    return default_confinement(was.settings) if was is not None and was.sandboxed else None
