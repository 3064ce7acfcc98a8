"""The ``shell_manage`` kinds that act on the home rather than on one shell: ``reap``, the
``macro-*`` kinds, ``vault-list`` and the ``workspace-*`` kinds.

Invariant: the destructive ones (``reap``, ``macro-rm``, ``workspace-delete``) under ``dryrun``
only read and say exactly what would go; ``vault-list`` never reads a value; ``workspace-restore``
opens new shells owned by the caller only when all of them fit under ``maxSessions``.
"""

from __future__ import annotations

from tether.config import Config
from tether.errors import UsageError
from tether.shells import lifecycle
from tether.shells.domain import Shells
from tether.shells.manage.kinds import Done, audit_note, snapshot_json
from tether.shells.records import now_ms
from tether.shells.requests import (
    MacroHistoryAction,
    MacroRestoreAction,
    MacroRmAction,
    MacroSetAction,
    ManageAction,
    WorkspaceDeleteAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.shells.safety.call_notes import note_outcome
from tether.shells.targets import check_capacity
from tether.store.macros import Macro, MacroEvent, MacroStore, MacroView
from tether.store.manual_locks import utc_text
from tether.store.vault import Vault
from tether.store.workspaces import ShellDescriptor, WorkspaceStore, fit_size


async def reap(shells: Shells, actor: str, dryrun: bool) -> Done:
    now = now_ms()
    lost = await lifecycle.lost_shells(shells, now)
    minutes = lifecycle.REAP_MIN_IDLE_MS // 60_000
    listed = [
        {"shell": s.record.id, "label": s.record.label, "idleMinutes": s.idle_ms // 60_000} for s in lost
    ]
    rows = [f"{s.record.id} label={s.record.label} idle {s.idle_ms // 60_000} min" for s in lost]
    if not lost:
        return Done(
            lines=(f"nothing to reap: no lost shell (record kept, tmux session gone) idle ≥ {minutes} min",),
            data={"reaped": [], "dryrun": dryrun},
        )
    if dryrun:
        note_outcome("reap", "dry-run")
        return Done(
            lines=(f"dryrun: would reap {len(lost)} lost shells; nothing was done", *rows),
            data={"wouldReap": listed, "dryrun": True},
        )
    snaps = lifecycle.reap(shells, lost, actor=actor, now=now)
    return Done(
        lines=(f"reaped {len(lost)} lost shells (each snapshotted first)", *rows),
        data={"reaped": listed, "snapshots": [snapshot_json(s) for s in snaps]},
    )


def _macro_json(m: Macro) -> dict[str, object]:
    return {
        "name": m.name,
        "scope": m.scope,
        "text": m.text,
        "submit": m.submit,
        "note": m.note,
        "updatedMs": m.updated_ms,
    }


def _macro_line(m: Macro) -> str:
    note = f" note={m.note!r}" if m.note else ""
    return f"/{m.name} [{m.scope}] submit={str(m.submit).lower()} at={m.updated_ms}: {m.text!r}{note}"


def _event_line(e: MacroEvent) -> str:
    what = "removed" if e.text is None else f"{e.text!r} submit={str(bool(e.submit)).lower()}"
    origin = f" (restored from {e.restored_from})" if e.restored_from else ""
    note = f" note={e.note!r}" if e.note else ""
    return f"at={e.at_ms} ({utc_text(e.at_ms)}) {e.op}{origin} [{e.scope}] by {e.actor}: {what}{note}"


def macro_kind(shells: Shells, action: ManageAction, view: MacroView, actor: str, dryrun: bool) -> Done:
    store = MacroStore(shells.store)
    if isinstance(action, MacroSetAction):
        if action.scope == "shell" and view.shell is None:
            raise UsageError(
                "action.scope='shell' files the macro under one shell: give target.sessions=<id> (or own "
                "exactly one shell, for target mine)"
            )
        m = store.set(
            action.name,
            action.text,
            view=view,
            actor=actor,
            scope=action.scope,
            submit=action.submit,
            note=action.note,
        )
        lines = [f"set {_macro_line(m)}"]
        if action.note:
            seq = audit_note(shells, actor=actor, action="macro-note", note=f"/{m.name}: {action.note}")
            lines.append(f"note written to the audit log (record {seq})")
        return Done(lines=tuple(lines), data={"macro": _macro_json(m)})
    if isinstance(action, MacroRmAction):
        if dryrun:
            current = store.get(action.name, view)
            if current is None:
                store.remove(action.name, view=view, actor=actor)  # raises the store's not-found message
            assert current is not None
            note_outcome("macro-rm", "dry-run")
            return Done(
                lines=(f"dryrun: would remove {_macro_line(current)}; nothing was done",),
                data={"dryrun": True, "wouldRemove": _macro_json(current)},
            )
        m = store.remove(action.name, view=view, actor=actor)
        return Done(
            lines=(f"removed /{m.name} [{m.scope}] (its history stays; macro-restore brings it back)",),
            data={"removed": _macro_json(m)},
        )
    if isinstance(action, MacroHistoryAction):
        events = store.history(action.name, view, days=action.days)
        lines = [_event_line(e) for e in events] or [f"no history of /{action.name} in {action.days} days"]
        data = [
            {
                "at": e.at_ms,
                "op": e.op,
                "scope": e.scope,
                "text": e.text,
                "submit": e.submit,
                "note": e.note,
                "actor": e.actor,
                "restoredFrom": e.restored_from,
            }
            for e in events
        ]
        return Done(lines=tuple(lines), data={"history": data})
    if isinstance(action, MacroRestoreAction):
        m = store.restore(action.name, action.at, view=view, actor=actor)
        return Done(lines=(f"restored {_macro_line(m)} from at={action.at}",), data={"macro": _macro_json(m)})
    macros = store.visible(view, shadowed=True)
    lines = [_macro_line(m) for m in macros] or ["no macros visible here; define one with macro-set"]
    return Done(lines=tuple(lines), data={"macros": [_macro_json(m) for m in macros]})


def vault_list(config: Config) -> Done:
    listing = Vault.open(config).list()
    lines: list[str] = []
    for g in listing.groups:
        if not g.protected:
            state = "no passphrase"
        elif g.locked:
            state = "locked (a person unlocks it: tether vault unlock " + g.name + ")"
        else:
            state = f"unlocked until {utc_text(g.unlocked_until_ms or 0)}"
        lines.append(f"group {g.name}: {g.items} secrets, {state}")
    lines += [f"{i.name} group={i.group} {'locked' if i.locked else 'usable'}" for i in listing.items]
    if not lines:
        lines = ["the vault is empty; a person adds secrets with `tether vault set NAME`"]
    groups = [
        {
            "name": g.name,
            "protected": g.protected,
            "locked": g.locked,
            "unlockedUntilMs": g.unlocked_until_ms,
            "items": g.items,
        }
        for g in listing.groups
    ]
    items = [{"name": i.name, "group": i.group, "locked": i.locked} for i in listing.items]
    return Done(lines=tuple(lines), data={"groups": groups, "secrets": items})


async def workspace_save(
    shells: Shells, action: WorkspaceSaveAction, shell_ids: list[str], actor: str
) -> Done:
    live = await shells.live()
    records = shells.records.shells()
    descriptors, notes = [], []
    for shell_id in shell_ids:
        pane, rec = live[shell_id], records.get(shell_id)
        cols, rows = fit_size(pane.cols, pane.rows)
        if (cols, rows) != (pane.cols, pane.rows):
            notes.append(f"[{shell_id}'s pane is {pane.cols}x{pane.rows}; saved as {cols}x{rows}]")
        descriptors.append(
            ShellDescriptor(
                label=rec.label if rec is not None else shell_id,
                cwd=pane.cwd or (rec.cwd if rec is not None else ""),
                cols=cols,
                rows=rows,
                idle_minutes=rec.idle_minutes if rec is not None else None,
                host=shells.host_of(shell_id).name,
            )
        )
    ws, replaced = WorkspaceStore(shells.store).save(action.name, descriptors, actor=actor)
    verb = "replaced" if replaced else "saved"
    return Done(
        lines=(
            f"{verb} workspace {ws.name!r} with {len(descriptors)} shells",
            *(_descriptor_line(d) for d in descriptors),
            *notes,
        ),
        data={"workspace": ws.name, "replaced": replaced, "shells": [d.to_json() for d in descriptors]},
    )


def _descriptor_line(d: ShellDescriptor) -> str:
    idle = "global" if d.idle_minutes is None else str(d.idle_minutes)
    return f"label={d.label} cwd={d.cwd} {d.cols}x{d.rows} idleMinutes={idle}"


def workspace_list(shells: Shells) -> Done:
    spaces = WorkspaceStore(shells.store).list()
    lines = [
        f"{w.name}: {len(w.shells)} shells, saved {utc_text(w.saved_ms)} by {w.actor} — "
        + "; ".join(d.label for d in w.shells)
        for w in spaces
    ] or ["no workspaces; save one with workspace-save"]
    data = [
        {"name": w.name, "savedMs": w.saved_ms, "actor": w.actor, "shells": [d.to_json() for d in w.shells]}
        for w in spaces
    ]
    return Done(lines=tuple(lines), data={"workspaces": data})


async def workspace_restore(shells: Shells, action: WorkspaceRestoreAction, actor: str) -> Done:
    descriptors = WorkspaceStore(shells.store).restore(action.name)
    await check_capacity(shells, len(descriptors), what=f"workspace {action.name!r}")
    # Every host before any shell: a workspace refused half-way would leave shells the error does
    # not name, and a retry would open them twice.
    hosts = [
        shells.check_host(d.host, f"workspace {action.name!r} shell {d.label!r}: host") for d in descriptors
    ]
    lines, opened = [], []
    for d, host in zip(descriptors, hosts, strict=True):
        cwd = d.cwd if d.cwd and await host.start_dir(d.cwd) else None
        rec, _ = await lifecycle.open_shell(
            shells,
            owner=actor,
            label=d.label,
            cwd=cwd,
            cols=d.cols,
            rows=d.rows,
            idle_minutes=d.idle_minutes,
            host_name=host.name,
        )
        gone = "" if cwd else f" (saved cwd {d.cwd} no longer exists)"
        where = "" if host.name == "local" else f" on {host.name}"
        lines.append(f"opened {rec.id}{where} label={rec.label} cwd={rec.cwd} {d.cols}x{d.rows}{gone}")
        opened.append({"shell": rec.id, "label": rec.label, "cwd": rec.cwd})
    return Done(
        lines=(f"restored workspace {action.name!r}: {len(opened)} new shells", *lines),
        data={"workspace": action.name, "opened": opened},
    )


def workspace_delete(shells: Shells, action: WorkspaceDeleteAction, dryrun: bool) -> Done:
    store = WorkspaceStore(shells.store)
    if dryrun:
        ws = store.get(action.name)
        note_outcome("workspace-delete", "dry-run")
        return Done(
            lines=(
                f"dryrun: would delete workspace {ws.name!r} ({len(ws.shells)} shells); nothing was done",
            ),
            data={"dryrun": True, "wouldDelete": ws.name},
        )
    ws = store.delete(action.name)
    return Done(
        lines=(f"deleted workspace {ws.name!r} ({len(ws.shells)} shells; no shell was touched)",),
        data={"deleted": ws.name},
    )
