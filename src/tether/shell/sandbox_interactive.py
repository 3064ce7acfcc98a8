"""Confining a long-lived interactive process — a persistent shell's pane command — like a one-shot one.

Invariant: ``confine_interactive(...)`` returns a command line that, whoever runs it (tmux runs a
pane's command through ``sh -c``), starts ``command`` inside bubblewrap under the very policy a
one-shot command in the same working directory gets — read-only filesystem except the working
directory and ``writable_roots``, persistence paths and every repository's control files
read-only, ``TETHER_HOME`` and ``hidden_paths`` masked, no network, no Unix sockets, kernel
interfaces read-only, own PID namespace — plus the binds the caller names (``ExtraBind``, e.g. the
shell's own directory for its rc file). The caller's terminal stays the controlling terminal, so
job control works; the system-call filter refuses ``TIOCSTI`` instead of ``--new-session``.

Why a launcher: writable binds go through descriptors (``sandbox_launch``), and a pane's command
is started by the tmux server, which inherits nothing from tether. So the command line runs
``sandbox_launch.py`` with a spec file written here (mode 0600, which the caller keeps out of the
sandbox: under ``TETHER_HOME`` it is masked), and the launcher opens the descriptors and execs
bubblewrap.

What the caller owns: the returned ``ConfinedInteractive`` holds placeholders for absent
protected paths for the shell's whole life — call ``release()`` when the shell has ended (a tether
process that dies first leaves them to the next process's sweep, which cannot know the shell
still runs). Git directories that appear while the shell lives are not bound read-only in it (its
mounts were fixed at start); call ``check_repositories()`` after each command, which neutralises
what appeared since the shell started and reports it (idempotent: it reports only what it undid).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import UsageError
from tether.shell import sandbox_launch
from tether.shell.sandbox_bwrap import ExtraBind, SandboxRun
from tether.shell.sandbox_git import neutralise
from tether.shell.sandbox_links import restore_links
from tether.shell.sandbox_policy import (
    PermissionMode,
    SandboxPolicy,
    SandboxSettings,
    build_policy,
    with_repositories,
)
from tether.shell.sandbox_repos import RepositoryGuard, RepoSnapshot
from tether.shell.types import ShellSandboxDenial

_GUARD = RepositoryGuard()


@dataclass(slots=True, kw_only=True)
class ConfinedInteractive:
    """A confined command line for a pane, and the host-side state it needs while it runs."""

    argv: tuple[str, ...]
    spec_path: Path
    policy: SandboxPolicy
    started: RepoSnapshot
    _base: SandboxPolicy
    _run: SandboxRun
    _guard: RepositoryGuard
    _released: bool = field(default=False)

    def shell_command(self) -> str:
        """The command line as one string for ``sh -c`` (what tmux ``new-session`` takes)."""
        return "exec " + shlex.join(self.argv)

    def check_repositories(self) -> tuple[ShellSandboxDenial, ...]:
        """Neutralise hooks and configuration that appeared in git directories since the shell
        started, and put back symlinked persistence paths it replaced (blocking: a directory walk
        and a ``git config`` per new repository)."""
        found = neutralise(self.started, self._guard.snapshot(self._base))
        return found + tuple(restore_links(self.policy.links, inside=self._run.inside_writable_root))

    def release(self) -> None:
        """Remove the placeholders and the spec file (idempotent; call once the shell ended)."""
        if self._released:
            return
        self._released = True
        self._run.cleanup()
        self.spec_path.unlink(missing_ok=True)


def confine_interactive(
    settings: SandboxSettings,
    *,
    home: Path,
    cwd: str,
    command: Sequence[str],
    spec_path: Path,
    mode: PermissionMode = "use_default",
    extra_binds: Sequence[ExtraBind] = (),
    guard: RepositoryGuard | None = None,
) -> ConfinedInteractive:
    """Build the pane command that runs ``command`` (e.g. ``bash --rcfile X -i``) confined.

    ``spec_path`` must lie where the sandbox cannot read it (under ``home``, which is masked).
    Raises ``UsageError`` / ``RefusedError`` as the one-shot executor does for a working
    directory or setting the sandbox cannot honour.
    """
    if mode == "require_escalated":
        raise UsageError("require_escalated runs unconfined: start the shell without confine_interactive")
    bwrap = settings.bwrap_path()
    repositories = guard or _GUARD
    base = build_policy(settings, mode=mode, cwd=cwd, home=home)
    started = repositories.snapshot(base)
    policy = with_repositories(base, started)
    run = SandboxRun(policy, trace=False, repos=started, extra_binds=extra_binds)
    try:
        plan = run.plan(bwrap, None, command, session=False)
        spec_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = spec_path.with_name(spec_path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"plan": sandbox_launch.encode(plan)}, handle)
        partial.replace(spec_path)
    except BaseException:
        run.cleanup()
        raise
    argv = (sys.executable, "-I", os.path.abspath(sandbox_launch.__file__), str(spec_path))
    return ConfinedInteractive(
        argv=argv,
        spec_path=spec_path,
        policy=policy,
        started=started,
        _base=base,
        _run=run,
        _guard=repositories,
    )
