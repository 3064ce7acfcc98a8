"""``manage``: the ``shell_manage`` kinds, on one shell or on the home.

Invariant: which kinds address one live shell is fixed here, once (``SHELL_KINDS``); every other
kind acts on the home, with its target (if any) as a selection. Each kind returns one ``Done``:
the lines the model reads plus the same facts as JSON ``data``.
"""

from __future__ import annotations

from tether.config import Config
from tether.errors import UsageError
from tether.shells.domain import Shells
from tether.shells.manage.doctor import doctor
from tether.shells.manage.home import (
    macro_kind,
    reap,
    vault_list,
    workspace_delete,
    workspace_list,
    workspace_restore,
    workspace_save,
)
from tether.shells.manage.kinds import NOT_READY, Done, revive, shell_kind, snapshot_list
from tether.shells.requests import (
    DoctorAction,
    ManageAction,
    Target,
    WorkspaceDeleteAction,
    WorkspaceRestoreAction,
    WorkspaceSaveAction,
)
from tether.shells.targets import resolve_target
from tether.store.macros import MacroView

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


async def manage_home(
    shells: Shells,
    config: Config,
    action: ManageAction,
    target: Target,
    actor: str,
    *,
    dryrun: bool,
    path: str,
) -> tuple[str | None, Done]:
    """A kind without a per-shell fan-out; returns the shell it was about (if one) and its result."""
    kind = action.kind
    if kind == "snapshot-list":
        return None, snapshot_list(shells, target, actor)
    if isinstance(action, WorkspaceSaveAction):
        ids = await resolve_target(shells, target, actor, write=False, path=path)
        return None, await workspace_save(shells, action, ids, actor)
    if kind.startswith("macro-"):
        shell = await _macro_shell(shells, target, actor, path)
        view = MacroView(conversation=actor, shell=shell)
        return shell, macro_kind(shells, action, view, actor, dryrun)
    if kind == "reap":
        return None, await reap(shells, actor, dryrun)
    if isinstance(action, DoctorAction):
        return None, await doctor(shells, action.note, actor)
    if kind == "vault-list":
        return None, vault_list(config)
    if kind == "workspace-list":
        return None, workspace_list(shells)
    if isinstance(action, WorkspaceRestoreAction):
        return None, await workspace_restore(shells, action, actor)
    assert isinstance(action, WorkspaceDeleteAction)
    return None, workspace_delete(shells, action, dryrun)


async def _macro_shell(shells: Shells, target: Target, actor: str, path: str) -> str | None:
    """The shell whose ``shell``-scope macros a macro kind sees: the one named, or the caller's
    only shell for ``mine``; ``None`` when ``mine`` is not exactly one shell."""
    if target.mode == "*":
        raise UsageError(f"{path}.sessions='*': macro kinds look at one shell at most; give one id")
    if target.mode == "ids":
        if len(target.ids) != 1:
            raise UsageError(f"{path}.sessions: macro kinds look at one shell at most; got {len(target.ids)}")
        return (await resolve_target(shells, target, actor, write=False, path=path))[0]
    live = await shells.live()
    records = shells.records.shells()
    mine = [i for i in live if (rec := records.get(i)) is not None and rec.owner == actor]
    return mine[0] if len(mine) == 1 else None


__all__ = [
    "NOT_READY",
    "NO_TARGET_KINDS",
    "SELECTION_KINDS",
    "SHELL_KINDS",
    "Done",
    "manage_home",
    "revive",
    "shell_kind",
]
