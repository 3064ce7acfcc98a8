"""The confined executor: local bash / pwsh run inside bubblewrap (``[shell].provider = "sandbox"``).

Invariant: a command either runs inside the sandbox the policy describes, or runs unconfined
because its request carried ``require_escalated`` with a justification *and* the deployment grants
that unattended — never unconfined by accident. A missing ``bwrap``, an invalid ``[sandbox]``
table or a working directory the sandbox cannot host refuses the command (or, at start-up, the
server) with an error saying how to fix it. Every escalation, granted or refused, is logged and
appended to the audit log (source ``tool``, action ``sandbox_escalation``) with its justification
before anything runs; if the audit log cannot be written, the escalation is refused. A mode the
configuration does not grant is put to a person by ``authorize`` (``sandbox.grants``), which the
tools call before ``resolve``; ``resolve`` alone grants only what the configuration lists.

The provider adds nothing to the process layer: it wraps the provider argv through the
``ShellConfinement`` seam of ``tether.shell.local`` (spawn, capture and tree kill stay in
``tether.process``) and reports ``ShellSandboxInfo`` — the mode that applied and the structured
denials of ``tether.shell.sandbox.denials`` — on the handle and the result. Around every confined
command the repositories under its roots are snapshotted (``sandbox.repos``): before, so their
control files are bound read-only; after, so whatever git directory or control file appeared is
neutralised (``sandbox.git``) before the result is available. The report never raises: what it
cannot read or check becomes a denial saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

from tether.approvals import Approvals, PersonChannel
from tether.audit.log import AuditLog
from tether.config import Config, ensure_home
from tether.errors import RefusedError, TetherError
from tether.shell.env_registry import ShellEnvRegistry
from tether.shell.execution import SettledShellExecution
from tether.shell.local import LocalBashExecutor, LocalPwshExecutor, LocalShellExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.sandbox import placeholders, usable
from tether.shell.sandbox.bwrap import SandboxRun, check_launcher, sweep_stale_traces
from tether.shell.sandbox.denials import (
    denials_from_filter,
    denials_from_stderr,
    denials_from_trace,
    hint_for,
)
from tether.shell.sandbox.git import appeared, neutralise
from tether.shell.sandbox.grants import EscalationGate, record_escalation
from tether.shell.sandbox.keeping import CommandKeeper
from tether.shell.sandbox.links import restore_links
from tether.shell.sandbox.policy import (
    DEFAULT_MODE,
    MODE_SUMMARIES,
    PERMISSION_MODES,
    PermissionMode,
    SandboxPolicy,
    SandboxSettings,
    build_policy,
    with_repositories,
)
from tether.shell.sandbox.repos import RepositoryGuard, RepoSnapshot
from tether.shell.types import (
    AbortSignal,
    ConfinedLaunch,
    ShellConfinement,
    ShellException,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
    ShellExecutor,
    ShellSandboxDenial,
    ShellSandboxInfo,
)

logger = logging.getLogger(__name__)

PROVIDER: Final = "bubblewrap"


class BubblewrapConfinement(ShellConfinement):
    """Wraps a provider argv in ``bwrap`` (plus ``strace`` for denials) per the spec's mode."""

    name = PROVIDER

    def __init__(self, settings: SandboxSettings, *, home: Path) -> None:
        self.settings = settings
        self.home = home
        self.bwrap = settings.bwrap_path()
        self.strace = shutil.which("strace") if settings.trace else None
        self._checked = False
        self._check_lock = asyncio.Lock()
        self.repositories = RepositoryGuard()
        if settings.trace and self.strace is None:
            logger.warning(
                "sandbox: strace is not installed; denials are reported from stderr messages only "
                "(install strace, or set [sandbox].trace = false to silence this)"
            )

    def _unchecked(self, cwd: str) -> bool:
        # One stat, as local.py does: a missing cwd is execute's SHELL_BAD_CWD, not the sandbox's.
        return not self._checked and os.path.isdir(cwd)

    async def check(self, cwd: str) -> None:
        """Before this process's first confined command (and after each that could not start):
        run ``true`` in a sandbox (``sandbox.usable``). bubblewrap refused: ``ShellException``
        (``SHELL_SPAWN``) naming the cause and the fix. Only the tracer failed (a kernel or
        container that forbids ptrace): denials are reported from stderr from then on, rather than
        failing every command."""
        if not self._unchecked(cwd):
            return
        async with self._check_lock:
            if self._checked:
                return
            if self.strace is None and usable.known_usable(self.bwrap):
                self._checked = True
                return
            found = await usable.probe(self.settings, home=self.home, cwd=cwd, strace=self.strace)
            if not found.ok and found.bwrap:
                raise usable.unusable(self.bwrap, found.detail)
            self._checked = True
            usable.note_usable(self.bwrap)
            if not found.ok:
                logger.warning(
                    "sandbox: strace cannot trace inside the sandbox here (%s); denials are reported from "
                    "stderr messages only",
                    found.detail,
                )
                self.strace = None

    def policy(self, mode: PermissionMode, cwd: str) -> SandboxPolicy:
        return build_policy(self.settings, mode=mode, cwd=cwd, home=self.home)

    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch:
        mode = _mode_of(spec)
        if mode == "require_escalated":
            info = ShellSandboxInfo(provider=PROVIDER, permissions=mode)

            async def unconfined(_stderr: str) -> ShellSandboxInfo:
                return info

            return ConfinedLaunch(argv=tuple(argv), report=unconfined)
        if shutil.which(self.bwrap) is None:
            raise ShellException(
                f"bubblewrap ({self.bwrap}) has disappeared; reinstall it (apt-get install bubblewrap) — "
                "the sandbox never runs a command unconfined",
                code="SHELL_MISSING",
            )
        # The repositories as they are right before the command: their control files are bound
        # read-only, and whatever git directory appears meanwhile is neutralised afterwards.
        base = self.policy(mode, spec.cwd)
        before = await self._snapshot(base)
        policy = with_repositories(base, before)
        run = SandboxRun(policy, trace=self.strace is not None, repos=before)
        try:
            wrapped = run.argv(self.bwrap, self.strace, argv)
            if run.kept:
                check_launcher()  # the keeper runs it from disk
        except BaseException:
            run.cleanup()
            raise
        keeper = CommandKeeper(run.kept) if run.kept else None
        bounds_text = self.settings.bounds_text()

        async def report(stderr_tail: str) -> ShellSandboxInfo:
            denials = list(self._denials(run, policy, stderr_tail))
            if keeper is not None and not await keeper.stop():
                denials.append(
                    ShellSandboxDenial(
                        kind="mount",
                        target=policy.cwd,
                        detail="a protected or hidden path changed on the host while the command ran "
                        "and could not be covered again, so the sandbox ended the command; run it again",
                    )
                )
            try:
                after = await self._snapshot(base)
                if appeared(before, after):  # renames, rewrites, maybe a git subprocess: off the loop
                    denials += await asyncio.to_thread(neutralise, before, after)
                denials += restore_links(policy.links, inside=run.inside_writable_root)
            except Exception as exc:  # never a hang or a traceback: say what could not be checked
                logger.exception("sandbox: checking the repositories after a command failed")
                denials.append(
                    ShellSandboxDenial(
                        kind="git",
                        target=policy.cwd,
                        detail=f"repositories could not be checked after the command ({exc}); "
                        "inspect .git/hooks and .git/config before running git here",
                    )
                )
            unique = tuple(dict.fromkeys(denials))
            return ShellSandboxInfo(
                provider=PROVIDER,
                permissions=mode,
                denials=unique,
                escalation_hint=hint_for(unique, policy, self.settings),
                bounds=bounds_text,
            )

        def cleanup() -> None:
            try:
                if keeper is not None:
                    keeper.kill()
            finally:
                run.cleanup()

        return ConfinedLaunch(
            argv=wrapped,
            report=report,
            cleanup=cleanup,
            pass_fds=run.pass_fds,
            started=keeper.started if keeper is not None else None,
            bounds=self.settings.bounds,
        )

    async def _snapshot(self, policy: SandboxPolicy) -> RepoSnapshot:
        if self.repositories.small(policy):
            return self.repositories.snapshot(policy)
        return await asyncio.to_thread(self.repositories.snapshot, policy)

    def _denials(
        self, run: SandboxRun, policy: SandboxPolicy, stderr_tail: str
    ) -> tuple[ShellSandboxDenial, ...]:
        try:
            if run.traced:
                found = denials_from_trace(run.trace_text(), policy)
            else:  # no tracer here: what the command printed is all there is
                found = denials_from_stderr(stderr_tail, policy, policy.cwd)
            return found + denials_from_filter(stderr_tail)
        except Exception as exc:
            logger.exception("sandbox: reading the denials of a command failed")
            return (
                ShellSandboxDenial(
                    kind="report", target=policy.cwd, detail=f"denials could not be read: {exc}"
                ),
            )


def _as_known(name: str) -> PermissionMode:
    for mode in PERMISSION_MODES:
        if mode == name:
            return mode
    raise RefusedError(f"sandbox mode {name!r} is not one of {', '.join(PERMISSION_MODES)}")


def _mode_of(spec: ShellExecSpec) -> PermissionMode:
    for mode in PERMISSION_MODES:
        if mode == (spec.sandbox_permissions or DEFAULT_MODE):
            return mode
    raise RefusedError(
        f"sandbox mode {spec.sandbox_permissions!r} was never granted; resolve the request first"
    )


class _SandboxedExecutor(LocalShellExecutor):
    """``resolve`` grants (or refuses and audits) the requested mode; ``execute`` is the local one."""

    permission_modes: tuple[str, ...] = PERMISSION_MODES
    default_permissions: str = DEFAULT_MODE
    shell_tool: str = "bash"

    def __init__(
        self,
        options: LocalShellOptions | None = None,
        *,
        settings: SandboxSettings,
        home: Path,
        audit: AuditLog | None = None,
        approvals: Approvals | None = None,
        env_registry: ShellEnvRegistry | None = None,
        keep_background: bool = False,
    ) -> None:
        self.sandbox = BubblewrapConfinement(settings, home=home)
        super().__init__(
            options, env_registry=env_registry, confinement=self.sandbox, keep_background=keep_background
        )
        self.settings = settings
        self.audit = audit
        self.gate = EscalationGate(settings, audit=audit, approvals=approvals)

    @property
    def sandbox_hint(self) -> str:
        """What the model is told about the sandbox (appended to the tool description)."""
        settings = self.settings
        roots = "".join(f", {root}" for root in settings.writable_roots)
        modes = "; ".join(f"`{mode}`: {MODE_SUMMARIES[mode]}" for mode in PERMISSION_MODES)
        granted = ", ".join(settings.allow_escalations) or "none (every escalation is refused)"
        return (
            f"Commands run in a sandbox: the filesystem is read-only except the working directory{roots} "
            "and a private /tmp; there is no network and no Unix socket; shell start-up files, ~/.ssh, git's "
            "global config, PATH directories, every repository's .git/hooks and .git/config and tether's "
            "own state are never writable, and hooks or git configuration a command creates are disabled "
            "before its result returns; processes outside are invisible. When the sandbox "
            "denies something, the result ends with `[sandbox denied: …]` and names the "
            f"`sandbox_permissions` value that would allow it. Values: {modes}. Any value but "
            "`use_default` needs a `justification`; granted in this deployment without asking a person: "
            f"{granted}."
        )

    async def execute(self, spec: ShellExecSpec, *, abort: AbortSignal | None = None) -> ShellExecution:
        if (abort is None or not abort.fired) and spec.sandbox_permissions != "require_escalated":
            try:
                await self.sandbox.check(spec.cwd)
            except ShellException as exc:  # nothing started: a settled SHELL_SPAWN, as a refused spawn
                return SettledShellExecution(timeout_ms=spec.timeout_ms, failure=exc)
        return await super().execute(spec, abort=abort)

    async def authorize(self, request: ShellExecRequest, *, person: PersonChannel | None) -> ShellExecRequest:
        """``request`` with its wider mode granted — by configuration, else by a person (asked
        through ``person``, else the panel's queue) — or ``RefusedError``; audited either way."""
        wanted = (request.sandbox_permissions or "").strip() or DEFAULT_MODE
        if wanted == DEFAULT_MODE:
            return request
        cwd = LocalShellExecutor.resolve(self, request).cwd
        if wanted != "require_escalated":
            self.sandbox.policy(
                _as_known(wanted), cwd
            )  # a cwd the sandbox cannot host: refused before asking
        grant = await self.gate.grant(
            mode=wanted,
            justification=request.justification,
            tool=self.shell_tool,
            subject=f"run `{request.command[:300]}` in {cwd}",
            command=request.command,
            asker=request.session_id or "local",
            targets=[cwd],
            person=person,
        )
        return dataclasses.replace(request, sandbox_permissions=grant.mode, granted_by=grant.granted_by)

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        spec = super().resolve(request)
        wanted = (request.sandbox_permissions or "").strip() or DEFAULT_MODE
        justification = (request.justification or "").strip() or None
        if request.granted_by is not None:  # granted (and audited) by ``authorize``
            mode = _as_known(wanted)
            if mode != "require_escalated":
                self.sandbox.policy(mode, spec.cwd)
            return dataclasses.replace(spec, sandbox_permissions=mode, justification=justification)
        try:
            mode = self.settings.check_escalation(wanted, justification)
            if mode != "require_escalated":
                self.sandbox.policy(mode, spec.cwd)  # refuses a cwd the sandbox cannot host, now
        except TetherError as exc:
            if wanted != DEFAULT_MODE:
                self._record(request, spec, wanted, justification, outcome="refused", detail=exc.message)
            raise
        if mode != DEFAULT_MODE:
            self._record(request, spec, mode, justification, outcome="ok", detail="granted without approval")
        return dataclasses.replace(spec, sandbox_permissions=mode, justification=justification)

    def _record(
        self,
        request: ShellExecRequest,
        spec: ShellExecSpec,
        mode: str,
        justification: str | None,
        *,
        outcome: Literal["ok", "refused"],
        detail: str,
    ) -> None:
        record_escalation(
            self.audit,
            actor=request.session_id or "local",
            tool=self.shell_tool,
            targets=[spec.cwd],
            command=request.command,
            mode=mode,
            justification=justification,
            outcome=outcome,
            detail=detail,
        )


class SandboxBashExecutor(_SandboxedExecutor, LocalBashExecutor):
    """``bash -c COMMAND`` inside bubblewrap."""

    name = "sandbox"
    shell_tool = "bash"


class SandboxPwshExecutor(_SandboxedExecutor, LocalPwshExecutor):
    """``pwsh -Command COMMAND`` inside bubblewrap."""

    name = "sandbox-pwsh"
    shell_tool = "pwsh"


def sandbox_executor(
    config: Config,
    *,
    shell: Literal["bash", "pwsh"] = "bash",
    options: LocalShellOptions | None = None,
    env_registry: ShellEnvRegistry | None = None,
    keep_background: bool = False,
) -> ShellExecutor:
    """The confined executor for ``config`` (validates ``[sandbox]`` and finds bwrap, or refuses)."""
    settings = SandboxSettings.from_config(config)
    ensure_home(config.home)  # masked inside the sandbox: it must exist to be mounted over
    real_home = os.path.realpath(config.home)
    if placeholders.sweep_stale(real_home) + sweep_stale_traces(real_home):
        logger.info("sandbox: removed placeholders / traces left by tether processes that died mid-command")
    cls = SandboxPwshExecutor if shell == "pwsh" else SandboxBashExecutor
    return cls(
        options or LocalShellOptions.from_config(config),
        settings=settings,
        home=config.home,
        audit=AuditLog(config.home),
        approvals=Approvals(config.home, timeout_s=config.approvals.timeout_s),
        env_registry=env_registry or ShellEnvRegistry(home=config.home),
        keep_background=keep_background,
    )


def with_sandbox(config: Config) -> Config:
    """``config`` with ``[shell].provider = "sandbox"`` (the ``--sandbox`` flag), checked up front."""
    SandboxSettings.from_config(config).bwrap_path()
    return config._replace(shell=config.shell._replace(provider="sandbox"))
