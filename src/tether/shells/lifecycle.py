"""What ``shell_manage`` does to shells: snapshot, rename, resize, respawn, close, reap, idle limit.

Invariant: a shell is never closed without a snapshot of it first (label, cwd, size and its
scrollback from the full output log), so ``shell_open from`` can revive anything closed by
``close``, idle reclaim or ``reap``; a snapshot is also left by ``rename`` and ``resize``. The record
changes (label, idle limit, closed) are single statements, so processes sharing a home never see a
half change. A *lost* shell is a record without a live tmux session; ``reap`` only closes lost
records idle for at least ``REAP_MIN_IDLE_MS``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import NotFoundError, UsageError
from tether.shells.logs import log_size
from tether.shells.reading import history_tail
from tether.shells.records import ShellRecord, now_ms
from tether.shells.tmux.control import SessionError
from tether.shells.vault.mask import SecretMasker
from tether.store.snapshots import Snapshot, SnapshotReason, SnapshotStore
from tether.store.vault import Vault
from tether.store.vault_crypto import VaultKeyError

if TYPE_CHECKING:
    from tether.shells.engine import PaneInfo, SessionEngine

REAP_MIN_IDLE_MS = 10 * 60_000
# Lines of scrollback a snapshot keeps (the store then caps it at 1 MiB of text).
SNAPSHOT_LINES = 20_000
PREAMBLE_BEGIN = "──── tether: revived scrollback of {old} (snapshot '{reason}' taken {when}) ────"
PREAMBLE_END = "──── end of revived scrollback; {new} starts here ────"


@dataclass(frozen=True, slots=True, kw_only=True)
class LostShell:
    record: ShellRecord
    idle_ms: int


def redactor(engine: SessionEngine) -> Callable[[str], str] | None:
    """The vault's masker over every value readable now (``None`` when the vault is empty)."""
    vault = Vault(engine.store, engine.home)
    try:
        values = vault.readable_values()
    except VaultKeyError:  # no readable key means no value could have reached a shell either
        return None
    masker = SecretMasker(values)
    return masker.mask if masker else None


def snapshots(engine: SessionEngine) -> SnapshotStore:
    return SnapshotStore(engine.store, engine.home, redact=redactor(engine))


def scrollback(engine: SessionEngine, shell_id: str) -> str:
    """The shell's output as read by ``shell_read`` history (markers removed), newest lines kept."""
    path = engine.log_of(shell_id)
    if not path.exists():
        return ""
    return "\n".join(history_tail(path, SNAPSHOT_LINES).lines)


def record(engine: SessionEngine, shell_id: str) -> ShellRecord:
    rec = engine.records.shells().get(shell_id)
    if rec is None:
        raise NotFoundError(
            f"shell {shell_id} has no tether record (it was not opened by tether, or it is closed); "
            "only shells opened with shell_open or the panel can be managed"
        )
    return rec


def take_snapshot(
    engine: SessionEngine,
    shell_id: str,
    *,
    reason: SnapshotReason,
    actor: str,
    pane: PaneInfo | None,
    rec: ShellRecord | None = None,
) -> Snapshot:
    """Snapshot a shell: size and cwd from the live pane when there is one, else from the record."""
    rec = rec if rec is not None else engine.records.shells().get(shell_id)
    label = rec.label if rec is not None else shell_id
    cwd = pane.cwd if pane is not None and pane.cwd else (rec.cwd if rec is not None else "")
    cols = pane.cols if pane is not None and pane.cols > 0 else engine.config.sessions.default_cols
    rows = pane.rows if pane is not None and pane.rows > 0 else engine.config.sessions.default_rows
    return snapshots(engine).take(
        shell_id=shell_id,
        label=label,
        cwd=cwd,
        cols=cols,
        rows=rows,
        reason=reason,
        text=scrollback(engine, shell_id),
        actor=actor,
    )


def set_label(engine: SessionEngine, shell_id: str, label: str) -> None:
    engine.store.execute("UPDATE shells SET label = ? WHERE id = ? AND closed_ms IS NULL", (label, shell_id))


def set_idle_minutes(engine: SessionEngine, shell_id: str, minutes: int) -> None:
    engine.store.execute(
        "UPDATE shells SET idle_minutes = ? WHERE id = ? AND closed_ms IS NULL", (minutes, shell_id)
    )


async def resize(engine: SessionEngine, pane: PaneInfo, cols: int, rows: int) -> PaneInfo:
    """Resize the shell's window; ``resize-window`` also pins ``window-size manual``, so an attached
    client of another size does not undo it."""
    await engine.control.run("resize-window", "-t", f"={pane.shell_id}:", "-x", str(cols), "-y", str(rows))
    return (await engine.live())[pane.shell_id]


async def respawn(engine: SessionEngine, pane: PaneInfo, cwd: str | None) -> PaneInfo:
    """Restart the shell process in the same pane (same id, session environment and log)."""
    start = cwd if cwd and _is_dir(cwd) else None
    shell = engine.config.sessions.shell or "bash"
    command = f"exec {_sh_quote(shell)} --rcfile {_sh_quote(str(engine.rcfile))} -i"
    args: list[str] = ["respawn-pane", "-k", "-t", pane.pane_id]
    if start is not None:
        args += ["-c", start]
    offset = log_size(engine.log_of(pane.shell_id))
    log = _sh_quote(str(engine.log_of(pane.shell_id)))
    # The old pipe ends with the old process, but only later: close it first and open a fresh one
    # in the same batch, so tmux pipes the new shell's first byte into the log.
    await engine.control.run_many(
        [
            ("pipe-pane", "-t", pane.pane_id),
            (*args, command),
            ("pipe-pane", "-t", pane.pane_id, f"exec cat >> {log}"),
        ]
    )
    fresh = (await engine.live()).get(pane.shell_id)
    if fresh is None:
        raise SessionError(f"shell {pane.shell_id} did not come back after respawn-pane")
    from tether.shells.waits import WaitSpec

    await engine.waits.wait(engine.ref(fresh), WaitSpec(kind="idle", timeout_ms=10_000), offset)
    engine.records.touch(pane.shell_id)
    return fresh


async def close(
    engine: SessionEngine,
    shell_id: str,
    *,
    actor: str,
    reason: SnapshotReason = "close",
    at_ms: int | None = None,
) -> Snapshot:
    """Snapshot (with scrollback), kill the tmux session, mark the record closed."""
    pane = (await engine.live()).get(shell_id)
    snap = take_snapshot(engine, shell_id, reason=reason, actor=actor, pane=pane)
    if pane is not None:
        with contextlib.suppress(SessionError):  # already gone: closing is idempotent
            await engine.control.run("kill-session", "-t", f"={shell_id}")
    engine.records.mark_closed(shell_id, at_ms if at_ms is not None else now_ms())
    return snap


async def lost_shells(
    engine: SessionEngine, now: int, min_idle_ms: int = REAP_MIN_IDLE_MS
) -> list[LostShell]:
    """Records whose tmux session is gone and that saw no input for ``min_idle_ms``."""
    live = await engine.live()
    lost = []
    for rec in engine.records.shells().values():
        idle = now - rec.last_activity_ms
        if rec.id not in live and idle >= min_idle_ms:
            lost.append(LostShell(record=rec, idle_ms=idle))
    return sorted(lost, key=lambda s: s.record.id)


def reap(engine: SessionEngine, lost: list[LostShell], *, actor: str, now: int) -> list[Snapshot]:
    """Close lost records (snapshotting what their logs still hold)."""
    taken = []
    for shell in lost:
        taken.append(
            take_snapshot(engine, shell.record.id, reason="close", actor=actor, pane=None, rec=shell.record)
        )
        engine.records.mark_closed(shell.record.id, now)
    return taken


def preamble(snap: Snapshot, text: str, new_id: str) -> bytes:
    """The marked block a revived shell's log starts with (terminal line endings, like a pane)."""
    from tether.store.manual_locks import utc_text

    lines = [
        PREAMBLE_BEGIN.format(old=snap.shell_id, reason=snap.reason, when=utc_text(snap.taken_ms)),
        *(
            [f"[{snap.dropped_bytes} older bytes were not kept in the snapshot]"]
            if snap.dropped_bytes
            else []
        ),
        *text.split("\n"),
        PREAMBLE_END.format(new=new_id),
    ]
    clean = ["".join(c for c in line if c >= " " or c == "\t") for line in lines]
    return ("\r\n".join(clean) + "\r\n").encode("utf-8")


def check_label(label: str, path: str) -> str:
    if not label.strip() or len(label) > 32 or any(ord(c) < 32 or ord(c) == 127 for c in label):
        raise UsageError(
            f"{path}: a label is 1-32 characters, not blank, without control characters; got {label!r}"
        )
    return label


def _is_dir(path: str) -> bool:
    return Path(path).is_dir()


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
