"""``shell_manage`` kind ``doctor``: check what persistent shells depend on, each with a fix.

Invariant: every check runs (one failing never hides the others) and reports ok or FAIL with what
it saw and, when it failed, how to repair it; the checks only read (a remote host is connected to,
and its state directory created if it was missing, as any use of it would). Each remote host is
one check, all of them at once. The caller's ``note`` goes
into the audit log as its own ``doctor-note`` record (the tool call itself is audited by the
dispatcher).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tether.audit import verify
from tether.config import load_config
from tether.errors import TetherError
from tether.shell import SandboxSettings
from tether.shells.domain import Shells
from tether.shells.guard import parse_section
from tether.shells.hosts import HostError, SshHost
from tether.shells.manage.kinds import Done, audit_note
from tether.shells.tmux import commands
from tether.store.vault import vault_settings

MIN_FREE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


async def _tmux(shells: Shells) -> Check:
    out = await shells.local.control.run(*commands.server_facts())
    pid, _, version = (out[0] if out else "").partition(" ")
    return Check(
        name="tmux server", ok=True, detail=f"pid {pid}, tmux {version}, socket {shells.local.socket}"
    )


async def _control(shells: Shells) -> Check:
    await shells.local.control.run(*commands.hub_ready())
    return Check(
        name="control-mode client", ok=True, detail="attached to the tether-hub session and answering"
    )


async def _store(shells: Shells) -> Check:
    rows = shells.store.query("PRAGMA quick_check")
    result = "; ".join(str(r[0]) for r in rows)
    if result != "ok":
        return Check(
            name="store",
            ok=False,
            detail=f"{shells.store.path}: {result}",
            fix="stop every tether process, then restore tether.db from a backup or move it aside",
        )
    count = len(shells.records.shells())
    return Check(
        name="store", ok=True, detail=f"{shells.store.path}: integrity ok, {count} open shell records"
    )


async def _audit(shells: Shells) -> Check:
    report = verify(shells.home)
    if report.ok:
        return Check(name="audit chain", ok=True, detail=report.summary())
    return Check(
        name="audit chain",
        ok=False,
        detail=report.summary().replace("\n", " "),
        fix="keep the file as evidence (someone or something altered it); `tether audit verify` shows "
        "the same break; move the damaged day file aside to start a new chain",
    )


async def _disk(shells: Shells) -> Check:
    usage = shutil.disk_usage(shells.home)
    free_mib = usage.free // (1024 * 1024)
    if usage.free < MIN_FREE_BYTES:
        return Check(
            name="disk space",
            ok=False,
            detail=f"{free_mib} MiB free under {shells.home}",
            fix=(
                f"free at least {MIN_FREE_BYTES // (1024 * 1024)} MiB there "
                f"(logs live in {shells.local.logs_dir})"
            ),
        )
    return Check(name="disk space", ok=True, detail=f"{free_mib} MiB free under {shells.home}")


async def _config(shells: Shells) -> Check:
    config = load_config(shells.home)
    parse_section(config.section("guard"))
    vault_settings(config)
    SandboxSettings.from_config(config)
    return Check(
        name="configuration",
        ok=True,
        detail=f"{config.home / 'config.toml'} valid (guard, vault and sandbox sections included)",
    )


_FIXES = {
    "tmux server": "install tmux ≥ 3.2; if it is installed, remove a stale $TETHER_HOME/tmux.sock",
    "control-mode client": "restart the tether process (its tmux control client reconnects on start)",
    "store": "check that $TETHER_HOME/tether.db is readable and writable",
    "audit chain": "check that $TETHER_HOME/audit is readable",
    "disk space": "check that $TETHER_HOME exists",
    "configuration": "correct config.toml as the message says, then restart tether",
}
CHECKS: tuple[tuple[str, Callable[[Shells], Awaitable[Check]]], ...] = (
    ("tmux server", _tmux),
    ("control-mode client", _control),
    ("store", _store),
    ("audit chain", _audit),
    ("disk space", _disk),
    ("configuration", _config),
)


async def _host(host: SshHost) -> Check:
    """A remote host: reachable over its shared connection, tmux there, its state directory."""
    name = f"host {host.name}"
    try:
        await host.connect()
        facts = await host.connection()
        await host.control.run(*commands.hub_ready())
    except HostError as exc:
        return Check(
            name=name,
            ok=False,
            detail=exc.message,
            fix=f"as the message says; the entry is [hosts.{host.name}] in config.toml "
            f"(try `{host.conn.terminal_command()}` in a terminal: the entry's port, identity and options)",
        )
    system = f", {facts.system}" if facts.system else ""
    port = f" port {host.section.port}" if host.section.port else ""
    return Check(
        name=name,
        ok=True,
        detail=f"reachable (ssh {host.section.ssh}{port}), tmux {facts.tmux}, state directory {facts.home} "
        f"writable{system}; process facts from {'/proc' if facts.proc else 'ps'}",
    )


async def doctor(shells: Shells, note: str | None, actor: str) -> Done:
    checks: list[Check] = []
    for name, run in CHECKS:
        try:
            checks.append(await run(shells))
        except (TetherError, OSError) as exc:
            message = exc.message if isinstance(exc, TetherError) else str(exc)
            checks.append(Check(name=name, ok=False, detail=message, fix=_FIXES[name]))
    remote = [h for h in shells.hosts.values() if isinstance(h, SshHost)]
    checks += await asyncio.gather(*(_host(h) for h in remote))
    failed = [c for c in checks if not c.ok]
    head = f"doctor: {len(checks) - len(failed)} ok, {len(failed)} FAILED" if failed else "doctor: all ok"
    lines = [head]
    for c in checks:
        lines.append(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
        if not c.ok:
            lines.append(f"     fix: {c.fix}")
    noted = None
    if note is not None:
        try:
            noted = audit_note(shells, actor=actor, action="doctor-note", note=note)
            lines.append(f"note written to the audit log (record {noted})")
        except TetherError as exc:
            lines.append(f"note NOT written to the audit log: {exc.message}")
    data = {
        "ok": not failed,
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix or None} for c in checks],
        "noteRecord": noted,
    }
    return Done(lines=tuple(lines), data=data)
