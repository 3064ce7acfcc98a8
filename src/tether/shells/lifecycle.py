"""A shell's life: open, snapshot, rename, resize, respawn, close, reap, idle limit.

Invariant: a shell is open once its bash reads its first line (its first prompt event), not while
its start-up files still run; each shell has its own integration nonce, kept in its record. A
shell is never closed without a snapshot of it first (label, cwd, size and its
scrollback from the full output log), so ``shell_open from`` can revive anything closed by
``close``, idle reclaim or ``reap``; a snapshot is also left by ``rename`` and ``resize``. A
snapshot is never written unmasked while the vault may have values to mask: when ``vault.key`` is
unusable and the vault holds values (or delivered ones), the snapshot keeps label, cwd and size but
its scrollback is replaced by a line saying why (``WITHHELD``), and the close goes on. The record
changes (label, idle limit, closed) are single statements, so processes sharing a home never see a
half change. A *lost* shell is a record without a live tmux session; ``reap`` only closes lost
records idle for at least ``REAP_MIN_IDLE_MS``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import NotFoundError, StorageError, UsageError
from tether.process.strays import Survivor
from tether.shells import ids
from tether.shells.domain import Shells
from tether.shells.host import Leftovers, ShellHost, ShellStart
from tether.shells.hosts import Confinement, HostError, rc_text
from tether.shells.logs import log_size
from tether.shells.reading import history_tail
from tether.shells.records import ShellRecord, closed_meanwhile, now_ms
from tether.shells.safety.call_notes import note_host
from tether.shells.tmux.commands import PaneInfo
from tether.shells.tmux.control import SessionError
from tether.shells.vault.mask import SecretMasker
from tether.shells.vault.redaction import masked_values
from tether.shells.waits import WaitSpec
from tether.store.locks import WriteLocks
from tether.store.snapshots import Snapshot, SnapshotReason, SnapshotStore
from tether.store.vault import Vault, VaultKeyError

logger = logging.getLogger(__name__)
_FIRST_PROMPT_MS = 10_000

REAP_MIN_IDLE_MS = 10 * 60_000
# Lines of scrollback a snapshot keeps (the store then caps it at 1 MiB of text).
SNAPSHOT_LINES = 20_000
PREAMBLE_BEGIN = "──── tether: revived scrollback of {old} (snapshot '{reason}' taken {when}) ────"
PREAMBLE_END = "──── end of revived scrollback; {new} starts here ────"
# A snapshot's text when the vault cannot mask it (``vault.key`` unusable while the vault holds values).
WITHHELD = (
    "[tether: the scrollback was not kept in this snapshot: vault values may be in it and none can "
    "be read to mask them ({why})]"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LostShell:
    record: ShellRecord
    idle_ms: int


def redactor(shells: Shells) -> Callable[[str], str] | None:
    """The vault's masker over every value readable now and every value delivered to a shell not
    closed since, whichever process delivered it (``None`` when there is none).

    A ``VaultKeyError`` propagates: with ``vault.key`` unusable (unreadable, too widely readable,
    replaced) after values were delivered, what would need masking can no longer be known, so the
    caller fails closed instead of writing text unmasked (the vault raises only when it holds
    something the key must open: an empty vault masks nothing and needs no key)."""
    values = masked_values(Vault(shells.store, shells.home))
    masker = SecretMasker(values)
    return masker.mask if masker else None


def snapshots(shells: Shells) -> SnapshotStore:
    """The snapshot store, for reading (listing, reviving); ``take_snapshot`` writes."""
    return SnapshotStore(shells.store, shells.home)


def scrollback(shells: Shells, shell_id: str) -> str:
    """The shell's output as read by ``shell_read`` history (markers removed), newest lines kept."""
    path = shells.log_of(shell_id)
    try:
        return "\n".join(history_tail(path, SNAPSHOT_LINES).lines)
    except StorageError as exc:  # something else in the log's place: the close goes on without it
        return f"[tether: no scrollback kept: {exc.message}]"


def record(shells: Shells, shell_id: str) -> ShellRecord:
    rec = shells.records.shells().get(shell_id)
    if rec is None:
        raise NotFoundError(
            f"shell {shell_id} has no tether record (it was not opened by tether, or it is closed); "
            "only shells opened with shell_open or the panel can be managed"
        )
    return rec


def take_snapshot(
    shells: Shells,
    shell_id: str,
    *,
    reason: SnapshotReason,
    actor: str,
    pane: PaneInfo | None,
    rec: ShellRecord | None = None,
) -> Snapshot:
    """Snapshot a shell: size and cwd from the live pane when there is one, else from the record."""
    rec = rec if rec is not None else shells.records.shells().get(shell_id)
    label = rec.label if rec is not None else shell_id
    cwd = pane.cwd if pane is not None and pane.cwd else (rec.cwd if rec is not None else "")
    cols = pane.cols if pane is not None and pane.cols > 0 else shells.config.sessions.default_cols
    rows = pane.rows if pane is not None and pane.rows > 0 else shells.config.sessions.default_rows
    try:
        redact = redactor(shells)
        text = scrollback(shells, shell_id)
    except VaultKeyError as exc:
        # Values may have reached this shell and none can be read to mask them: its scrollback is
        # not written at all (never in clear), and the snapshot says why. Closing still closes.
        logger.warning("snapshot of %s keeps no scrollback: %s", shell_id, exc.message)
        redact, text = None, WITHHELD.format(why=exc.message)
    return SnapshotStore(shells.store, shells.home, redact=redact).take(
        shell_id=shell_id,
        label=label,
        cwd=cwd,
        cols=cols,
        rows=rows,
        reason=reason,
        text=text,
        actor=actor,
    )


def set_label(shells: Shells, shell_id: str, label: str) -> None:
    sql = "UPDATE shells SET label = ? WHERE id = ? AND closed_ms IS NULL"
    if not shells.store.execute(sql, (label, shell_id)):
        raise closed_meanwhile(shell_id)


def set_idle_minutes(shells: Shells, shell_id: str, minutes: int) -> None:
    shells.store.execute(
        "UPDATE shells SET idle_minutes = ? WHERE id = ? AND closed_ms IS NULL", (minutes, shell_id)
    )


async def resize(shells: Shells, shell_id: str, cols: int, rows: int) -> PaneInfo:
    """Resize the shell's window; returns once its terminal has the new size. ``resize-window``
    also pins ``window-size manual``, so an attached client of another size does not undo it."""
    host, pane = await shells.pane(shell_id, output=False)
    await host.resize(pane, cols, rows)
    return await host.pane_now(shell_id)


def start_of(shell_id: str, nonce: str, confinement: Confinement | None = None) -> ShellStart:
    return ShellStart(
        rc_text=rc_text(nonce, confinement),
        nonce=nonce,
        env=(("TETHER_SHELL", shell_id),),
        confinement=confinement,
    )


@dataclass(frozen=True, slots=True)
class Respawned:
    """A respawn: the new shell's pane, and what of the old shell's processes could not be ended
    (``Leftovers``, masked as a close's are)."""

    pane: PaneInfo
    left: Leftovers


async def respawn(shells: Shells, shell_id: str, cwd: str | None) -> Respawned:
    """Restart the shell process in the same pane (same id, session environment and log)."""
    host, pane = await shells.pane(shell_id, output=False)
    confinement = shells.confinement_of(shell_id)
    if confinement is None and shells.confines:
        confinement = shells.default_confinement()
        shells.set_confinement(shell_id, confinement)
    if confinement is not None and confinement.sandboxed:
        rec = shells.record(shell_id)
        # A relative directory (a record written before they were stored absolute) would be
        # resolved against this process's working directory: a different root.
        stored = rec.cwd if rec is not None and os.path.isabs(rec.cwd) else None
        cwd = stored if stored is not None and await host.start_dir(stored) else None
        if cwd is None:
            raise UsageError(
                f"shell {shell_id} is confined to the directory it was opened in, which no longer "
                "exists (or was recorded as a relative path); close it and open a new one"
            )
    host.check_start(start_of(shell_id, "0", confinement))
    start = await host.start_dir(cwd) if cwd else None
    # The same nonce: the shell keeps its identity, and every process keeps reading its events.
    nonce = shells.nonce_of(shell_id) or ids.new_nonce()
    offset = log_size(host.log_of(shell_id))
    shells.set_nonce(shell_id, nonce)
    left = _masked(shells, await host.respawn(pane, cwd=start, start=start_of(shell_id, nonce, confinement)))
    fresh = await host.pane_now(shell_id)
    await first_prompt(shells, host, fresh, offset, nonce)
    shells.records.touch(shell_id)
    return Respawned(fresh, left)


async def first_prompt(shells: Shells, host: ShellHost, pane: PaneInfo, offset: int, nonce: str) -> bool:
    """Wait until a new shell reads its first line (its start-up files have run)."""
    spec = WaitSpec(kind="prompt", timeout_ms=_FIRST_PROMPT_MS)
    out = await shells.waits(host).wait(pane, spec, offset, nonce=nonce)
    return out.met


async def open_shell(
    shells: Shells,
    *,
    owner: str,
    label: str,
    cwd: str | None,
    cols: int,
    rows: int,
    idle_minutes: int | None,
    preamble: Callable[[str], bytes] | None = None,
    host_name: str = "local",
    confinement: Confinement | None = None,
) -> tuple[ShellRecord, bool]:
    """Open a shell; ``preamble(new_id)`` (a revived shell's old scrollback) starts its log;
    ``confinement``: a granted one (else the deployment's default). Returns the record and whether
    the shell reached its first prompt in time."""
    host = shells.check_host(host_name, "open.host")
    confinement = confinement if confinement is not None else shells.default_confinement()
    host.check_start(start_of("dsh-000000", "0", confinement))  # before any connection is made
    await host.connect()
    start_dir = await host.start_dir(cwd)
    if start_dir is None:
        where = "" if host.name == "local" else f" on host {host.name}"
        raise UsageError(
            f"open.cwd {cwd!r} is not a directory{where}; give an existing directory or omit cwd"
        )
    for attempt in range(5):
        shell_id = ids.new_shell_id()
        # Unique among every record and the host's sessions, each asked of this id alone: a home
        # with months of closed shells, or hundreds open, costs an open no more than a new one.
        if shells.records.any_shell(shell_id) is not None or await host.panes(lean=True, only=[shell_id]):
            continue
        log = host.log_of(shell_id)
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        head = b"" if preamble is None else preamble(shell_id)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(head)
        nonce = ids.new_nonce()
        record = ShellRecord(
            id=shell_id,
            owner=owner,
            label=label or shell_id,
            created_ms=now_ms(),
            cwd=start_dir,
            last_activity_ms=now_ms(),
            idle_minutes=idle_minutes,
            host=host.name,
            nonce=nonce,
            confinement=confinement.to_json() if confinement is not None else "",
        )
        # Recorded before tmux is asked: a connection that drops under the request may leave the
        # shell created on the host, and a shell there is never one nobody can see or close.
        shells.records.add_shell(record)
        note_host(shell_id, host.name)
        try:
            start = start_of(shell_id, nonce, confinement)
            await host.create(shell_id, cwd=start_dir, cols=cols, rows=rows, start=start)
        except HostError as exc:
            if exc.shell == shell_id:  # tmux may have been asked (SshHost.create): keep the record
                raise _with_shell(exc, shell_id, host.name, created=False) from exc
            shells.records.drop_shell(shell_id)
            raise
        except BaseException as exc:
            shells.records.drop_shell(shell_id)  # tmux answered no (or nothing was sent): not there
            # Another process took this id in the same instant: draw again.
            if isinstance(exc, SessionError) and "duplicate session" in exc.message and attempt < 4:
                continue
            raise
        break
    else:
        raise SessionError("no free shell id after 5 draws (36^6 ids); try again")
    try:
        pane = await host.pane_now(shell_id)
        reached = await first_prompt(shells, host, pane, len(head), nonce)
    except HostError as exc:
        raise _with_shell(exc, shell_id, host.name, created=True) from exc
    return record, reached


def _with_shell(exc: HostError, shell_id: str, host: str, *, created: bool) -> HostError:
    """The host's error for a ``shell_open`` it cut short, naming the shell recorded there (the
    caller returns its id): a connection that dropped while tmux was asked may or may not have
    left it created; one that dropped after tmux answered left it running."""
    if created:
        what = f"shell {shell_id} was opened on {host} before that: it runs there, use it once {host} answers"
    else:
        what = (
            f"shell {shell_id} was being opened on {host} when that happened: it may have been created "
            f"there; once {host} answers, shell_state {{sessions: {shell_id}}} shows it — close it with "
            "shell_manage close if it is not wanted (reap closes its record if it never started)"
        )
    err = type(exc)(f"{exc.message}. {what}")
    err.shell = shell_id
    return err


@dataclass(frozen=True, slots=True)
class Closed:
    """A close: the snapshot it took, and what it could not end (``Leftovers``; the command
    lines masked with the vault's values, read before the shell's delivered values are dropped)."""

    snapshot: Snapshot
    left: Leftovers


async def close(
    shells: Shells,
    shell_id: str,
    *,
    actor: str,
    reason: SnapshotReason = "close",
    at_ms: int | None = None,
) -> Closed:
    """Claim the close, snapshot (with scrollback), kill the tmux session and what it started.

    The record is marked closed first, in one statement, so of two closes at once (two
    conversations, the panel, another process's idle sweep) one closes and snapshots and the other
    is ``NOT_FOUND``: a close is counted once. A snapshot that fails undoes the claim."""
    host = shells.host_of(shell_id)
    pane = (await host.panes()).get(shell_id)
    rec = shells.records.shell(shell_id)
    confinement = shells.confinement_of(shell_id)  # read while the record is open
    at = at_ms if at_ms is not None else now_ms()
    claimed = (
        shells.records.mark_closed(shell_id, at) if rec is not None else not shells.records.closed(shell_id)
    )
    if not claimed:
        raise closed_meanwhile(shell_id)
    try:
        snap = take_snapshot(shells, shell_id, reason=reason, actor=actor, pane=pane, rec=rec)
    except BaseException:
        if rec is not None:
            shells.records.reopen(shell_id, at)
        raise
    await check_confined(shells, host, shell_id, rec, confinement)  # before the sandbox goes
    left = Leftovers()
    if pane is not None:
        left = _masked(shells, await host.kill(shell_id))  # a session gone already: idempotent
    forget_delivered(shells, shell_id)
    WriteLocks(shells.home).discard(shell_id)
    shells.forget(shell_id)
    return Closed(snap, left)


def _masked(shells: Shells, left: Leftovers) -> Leftovers:
    """A survivor's command line may hold a value the vault delivered to the shell."""
    if not left.processes:
        return left
    mask = redactor(shells) or (lambda text: text)
    return Leftovers(
        processes=tuple(Survivor(p.pid, mask(p.command)) for p in left.processes), unknown=left.unknown
    )


def forget_delivered(shells: Shells, shell_id: str) -> None:
    """Drop the values delivered to a closed shell (after its snapshot was masked with them)."""
    Vault(shells.store, shells.home).delivered.forget(shell_id)


async def check_confined(
    shells: Shells,
    host: ShellHost,
    shell_id: str,
    rec: ShellRecord | None = None,
    confinement: Confinement | None = None,
) -> None:
    """Neutralise what a confined shell left in git directories (outside a run: a person's
    commands, a background job); never fails the caller. A close passes the record and the
    confinement it read before it marked the record closed."""
    confinement = confinement if confinement is not None else shells.confinement_of(shell_id)
    rec = rec if rec is not None else shells.record(shell_id)
    if confinement is None or rec is None:
        return
    try:
        await host.check_confined(shell_id, rec.cwd, confinement)
    except Exception:
        logger.exception("sandbox: checking the repositories of %s failed", shell_id)


async def lost_shells(shells: Shells, now: int, min_idle_ms: int = REAP_MIN_IDLE_MS) -> list[LostShell]:
    """Records whose tmux session is gone and that saw no input for ``min_idle_ms``."""
    live = await shells.live()
    lost = []
    for rec in shells.records.shells().values():
        idle = now - rec.last_activity_ms
        if rec.host in shells.down or rec.host not in shells.hosts:
            continue  # a host out of reach: its shells may well live on there
        if rec.id not in live and idle >= min_idle_ms:
            lost.append(LostShell(record=rec, idle_ms=idle))
    return sorted(lost, key=lambda s: s.record.id)


def reap(shells: Shells, lost: list[LostShell], *, actor: str, now: int) -> list[Snapshot]:
    """Close lost records (snapshotting what their logs still hold)."""
    taken = []
    for shell in lost:
        taken.append(
            take_snapshot(shells, shell.record.id, reason="close", actor=actor, pane=None, rec=shell.record)
        )
        shells.records.mark_closed(shell.record.id, now)
        forget_delivered(shells, shell.record.id)
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
