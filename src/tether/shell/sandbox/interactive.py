"""Confining a long-lived interactive process — a persistent shell's pane command — like a one-shot one.

Invariant: ``confine_interactive(...)`` returns a command line that, whoever runs it (tmux runs a
pane's command through ``sh -c``), starts ``command`` inside bubblewrap under the very policy a
one-shot command in the same working directory gets — read-only filesystem except the working
directory and ``writable_roots``, persistence paths and every repository's control files
read-only, ``TETHER_HOME`` and ``hidden_paths`` masked, no network, no Unix sockets, kernel
interfaces read-only, own PID namespace — plus the binds the caller names (``ExtraBind``, e.g. the
shell's own directory for its rc file). The caller's terminal stays the controlling terminal, so
job control works; the system-call filter refuses ``TIOCSTI`` instead of ``--new-session``.

Everything the shell needs outside the sandbox lives in its *state directory* (under
``TETHER_HOME``, so masked inside), which any tether process can ``ConfinedShell.attach`` to: the
launcher's spec, the repositories as they were at start (``repos.json``), the ledger of its
placeholders, the trace FIFO and the per-command trace files (``runs/``).

Why a launcher: writable binds go through descriptors (``sandbox.launch``), and a pane's command
is started by the tmux server, which inherits nothing from tether. So the command line runs
``launch.py`` with the spec, and the launcher forks the keeper of the mounts the host may undo
(``sandbox.keeper``: a rename over a protected path drops its mount in the living sandbox) and
the trace collector (``sandbox.collect``), opens the descriptors and execs bubblewrap (with
``strace`` inside when the tracer works here).

What the caller owns: placeholders for absent protected paths are listed in the shell's ledger
and stay for the shell's whole life — name the pane's pid with ``owned_by`` once it runs, and call
``ConfinedShell.release`` when the shell has ended (a ledger whose pid is gone is swept by the next
process). Git directories that appear while the shell lives are not bound read-only in it (its
mounts were fixed at start); call ``check_repositories()`` after each command, which neutralises
what appeared since the shell started and reports it (idempotent: it reports only what it undid).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tether.config import EnvSection
from tether.errors import UsageError
from tether.home import replace_file
from tether.process.bounds import Reached, reached_lines, remove_shell_groups, shell_plan, shell_reached
from tether.process.bounds import support as bounds_support
from tether.process.env import build_child_env
from tether.shell.sandbox import launch
from tether.shell.sandbox.bwrap import TRACE_FILE, ExtraBind, SandboxRun, check_launcher
from tether.shell.sandbox.collect import END, mark_path
from tether.shell.sandbox.denials import denials_from_filter, denials_from_trace, hint_for
from tether.shell.sandbox.git import neutralise
from tether.shell.sandbox.links import restore_links
from tether.shell.sandbox.placeholders import ShellPlaceholders
from tether.shell.sandbox.policy import (
    PRIVATE_TMP,
    PermissionMode,
    SandboxPolicy,
    SandboxSettings,
    build_policy,
    with_repositories,
)
from tether.shell.sandbox.repos import RepositoryGuard, RepoSnapshot
from tether.shell.types import ShellSandboxDenial, ShellSandboxInfo

PROVIDER: Final = "bubblewrap"
SPEC_FILE: Final = "launch.json"
REPOS_FILE: Final = "repos.json"
LEDGER_FILE: Final = "placeholders"
RUNS_DIR: Final = "runs"
_GUARD = RepositoryGuard()
_TRACER_WORKS: dict[tuple[str, str], bool] = {}


@dataclass(slots=True, kw_only=True)
class ConfinedShell:
    """One confined persistent shell's host-side state (see the module docstring)."""

    state_dir: Path
    policy: SandboxPolicy
    settings: SandboxSettings
    started: RepoSnapshot
    traced: bool
    argv: tuple[str, ...] = ()
    _base: SandboxPolicy
    _guard: RepositoryGuard = field(default_factory=lambda: _GUARD)
    _placeholders: ShellPlaceholders | None = None
    # The launcher's plan of bounds (``tether.process.bounds.shell_plan``; None: none apply), and
    # what its groups had met when this process last reported (each event is reported once here).
    bounds: dict[str, Any] | None = None
    _reported: Reached = field(default_factory=Reached)

    @property
    def bounds_text(self) -> str:
        """What the shell may take, as its ``sandbox`` summary says it."""
        if self.bounds is not None and isinstance(self.bounds.get("text"), str):
            return str(self.bounds["text"])
        if self.settings.bounds is not None and bounds_support().dirs:
            # Bounds apply here, but this shell's launcher joined none (it started before they did).
            return "processes and memory not bounded (the shell started without bounds; open a new one)"
        return self.settings.bounds_text()

    @classmethod
    def attach(
        cls,
        state_dir: Path,
        settings: SandboxSettings,
        *,
        home: Path,
        cwd: str,
        mode: PermissionMode,
        guard: RepositoryGuard | None = None,
    ) -> ConfinedShell:
        """The state of a shell another process (or this one, earlier) started. The policy is
        rebuilt from the same settings; the repositories are those recorded at its start."""
        base = build_policy(settings, mode=mode, cwd=cwd, home=home)
        try:
            started = RepoSnapshot.from_json(json.loads((state_dir / REPOS_FILE).read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            started = RepoSnapshot(gitdirs={}, pointers=())
        plan = _bounds_of(state_dir)
        return cls(
            state_dir=state_dir,
            policy=with_repositories(base, started),
            settings=settings,
            started=started,
            traced=(state_dir / RUNS_DIR).is_dir(),
            _base=base,
            _guard=guard or _GUARD,
            bounds=plan,
            _reported=shell_reached(plan),
        )

    def shell_command(self) -> str:
        """The command line as one string for ``sh -c`` (what tmux ``new-session`` takes)."""
        return "exec " + shlex.join(self.argv)

    def owned_by(self, pid: int) -> None:
        """The shell runs as ``pid`` (its pane's process): its placeholders live as long as it."""
        if self._placeholders is not None:
            self._placeholders.owned_by(pid)

    def check_repositories(self) -> tuple[ShellSandboxDenial, ...]:
        """Neutralise hooks and configuration that appeared in git directories since the shell
        started, and put back symlinked persistence paths it replaced (blocking: a directory walk
        and a ``git config`` per new repository)."""
        found = neutralise(self.started, self._guard.snapshot(self._base))
        inside = SandboxRun(self.policy, trace=False).inside_writable_root
        return found + tuple(restore_links(self.policy.links, inside=inside))

    def run_file(self, token: int) -> Path:
        return self.state_dir / RUNS_DIR / str(token)

    def run_trace(self, token: int) -> str | None:
        """The trace lines of the command that ran with ``token``, once its file is complete."""
        try:
            data = self.run_file(token).read_bytes()
        except OSError:
            return None
        if not data.endswith(END):
            return None
        return data[: -len(END)].decode("utf-8", "replace")

    def report(
        self, *, trace: str | None, output: str, repositories: tuple[ShellSandboxDenial, ...]
    ) -> ShellSandboxInfo:
        """One command's ``ShellSandboxInfo``: its traced denials (or what its output says, when
        there is no trace), the filter's refusals its output names, and the repository check."""
        denials: list[ShellSandboxDenial] = []
        if trace is not None:
            denials += denials_from_trace(trace, self.policy)
        elif self.traced:
            denials.append(
                ShellSandboxDenial(
                    kind="report",
                    target=self.policy.cwd,
                    detail="the trace of this command did not arrive; denials are not reported",
                )
            )
        denials += denials_from_filter(output)
        denials += repositories
        unique = tuple(dict.fromkeys(denials))
        hint = hint_for(unique, self.policy, self.settings, again="open a new shell with")
        return ShellSandboxInfo(
            provider=PROVIDER,
            permissions=self.policy.mode,
            denials=unique + self._bounds_reached(),
            escalation_hint=hint,
            bounds=self.bounds_text,
        )

    def _bounds_reached(self) -> tuple[ShellSandboxDenial, ...]:
        """The bounds the shell's tree met since the last report (the kernel refused forks, or
        killed a process for memory): whatever ran in the shell meanwhile met them."""
        bounds = self.settings.bounds
        if self.bounds is None or bounds is None:
            return ()
        now = shell_reached(self.bounds)
        lines = reached_lines(now, bounds, since=self._reported)
        self._reported = now
        return tuple(ShellSandboxDenial(kind="limit", target=what, detail=text) for what, text in lines)

    @staticmethod
    def release(state_dir: Path, *, home: Path) -> None:
        """The shell has ended: its placeholders go (unless another sandbox uses them), then its
        state directory (idempotent)."""
        ShellPlaceholders.release(state_dir / LEDGER_FILE, home=str(home))
        remove_shell_groups(_bounds_of(state_dir))
        shutil.rmtree(state_dir, ignore_errors=True)


def confine_interactive(
    settings: SandboxSettings,
    *,
    home: Path,
    cwd: str,
    command: Sequence[str],
    state_dir: Path,
    mode: PermissionMode = "use_default",
    extra_binds: Sequence[ExtraBind] = (),
    mark_nonce: str | None = None,
    guard: RepositoryGuard | None = None,
) -> ConfinedShell:
    """Build the pane command that runs ``command`` (e.g. ``bash --rcfile X -i``) confined.

    ``state_dir`` must lie where the sandbox cannot read it (under ``home``, which is masked).
    ``mark_nonce``: trace the shell's whole tree, cut per command at the marks its prompt hook
    makes under ``sandbox.collect.mark_path(mark_nonce)`` (when strace is installed, enabled and
    works here). Raises ``UsageError`` / ``RefusedError`` as the one-shot executor does for a
    working directory or setting the sandbox cannot honour.
    """
    if mode == "require_escalated":
        raise UsageError("require_escalated runs unconfined: start the shell without confine_interactive")
    check_launcher()  # the pane runs it from disk
    bwrap = settings.bwrap_path()
    repositories = guard or _GUARD
    base = build_policy(settings, mode=mode, cwd=cwd, home=home)
    for directory in (*reversed(state_dir.parents[: len(state_dir.relative_to(home).parts) - 1]), state_dir):
        directory.mkdir(mode=0o700, exist_ok=True)
    started = repositories.snapshot(base)
    _write_private(state_dir / REPOS_FILE, json.dumps(started.to_json()))
    policy = with_repositories(base, started)
    strace = _tracer(settings, bwrap, home) if mark_nonce is not None else None
    trace_dir, collect = (None, None)
    if strace is not None and mark_nonce is not None:
        trace_dir, collect = _trace_plan(state_dir, mark_nonce)
    held = ShellPlaceholders(state_dir / LEDGER_FILE, home=policy.tether_home)
    held.owned_by(os.getpid())  # until the pane runs: a sweep elsewhere leaves the directory alone
    run = SandboxRun(
        policy,
        trace=False,
        repos=started,
        extra_binds=extra_binds,
        trace_dir=trace_dir,
        shell_placeholders=held,
    )
    plan = run.plan(bwrap, strace, command, session=False)
    bounds = settings.bounds
    # Named by the shell's state directory: unique per home and shell, and the same at a respawn.
    key = hashlib.sha256(os.fsencode(os.path.realpath(state_dir))).hexdigest()[:16]
    groups = shell_plan(key, bounds) if bounds is not None else None
    joined = groups if groups is not None and groups["groups"] else None
    spec = {
        "plan": launch.encode(plan),
        "collect": collect,
        "keep": [list(entry) for entry in run.kept],
        "bounds": joined,
    }
    _write_private(state_dir / SPEC_FILE, json.dumps(spec))
    argv = (sys.executable, "-I", os.path.abspath(launch.__file__), str(state_dir / SPEC_FILE))
    return ConfinedShell(
        state_dir=state_dir,
        policy=policy,
        settings=settings,
        started=started,
        traced=strace is not None,
        argv=argv,
        _base=base,
        _guard=repositories,
        _placeholders=held,
        bounds=joined,
        _reported=shell_reached(joined),
    )


def _trace_plan(state_dir: Path, nonce: str) -> tuple[str, dict[str, str]]:
    """A fresh FIFO directory for this start (a collector of an earlier start of the same pane may
    still be draining the old one) and a cleared ``runs/``."""
    for old in state_dir.glob("trace-*"):
        shutil.rmtree(old, ignore_errors=True)
    runs = state_dir / RUNS_DIR
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(mode=0o700)
    trace_dir = state_dir / f"trace-{secrets.token_hex(4)}"
    trace_dir.mkdir(mode=0o700)
    fifo = trace_dir / TRACE_FILE
    os.mkfifo(fifo, 0o600)
    return str(trace_dir), {"fifo": str(fifo), "runs": str(runs), "nonce": nonce}


def _tracer(settings: SandboxSettings, bwrap: str, home: Path) -> str | None:
    """strace, if enabled, installed, and able to trace inside a sandbox here (checked once per
    process: a kernel or container that forbids ptrace would otherwise end every shell at once)."""
    strace = shutil.which("strace") if settings.trace else None
    if strace is None:
        return None
    key = (bwrap, strace)
    if key not in _TRACER_WORKS:
        _TRACER_WORKS[key] = _tracer_check(settings, bwrap, strace, home)
    return strace if _TRACER_WORKS[key] else None


def _tracer_check(settings: SandboxSettings, bwrap: str, strace: str, home: Path) -> bool:
    """``true`` under the tracer, in a sandbox with the shells' own filter and mounts."""
    # In the private /tmp: no host directory is bound (TMPDIR may lie where no writable root may).
    run = SandboxRun(build_policy(settings, mode="use_default", cwd=PRIVATE_TMP, home=home), trace=False)
    try:
        traced = (strace, "-D", "-f", "-qq", "--seccomp-bpf", "-e", "trace=openat", "-o", "/dev/null")
        argv = run.argv(bwrap, None, (*traced, "--", "true"))
        done = subprocess.run(
            argv,
            env=build_child_env(None, EnvSection()),
            pass_fds=run.pass_fds,
            capture_output=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        run.cleanup()


def _bounds_of(state_dir: Path) -> dict[str, Any] | None:
    """The plan of bounds the shell's launcher joined (its spec's ``bounds``), if any."""
    try:
        value = json.loads((state_dir / SPEC_FILE).read_text()).get("bounds")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


def _write_private(path: Path, text: str) -> None:
    replace_file(path, text.encode("utf-8"))


__all__ = ["PROVIDER", "ConfinedShell", "confine_interactive", "mark_path"]
