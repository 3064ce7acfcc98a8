"""Whether bubblewrap can build a sandbox on this machine, asked before a process's first confined
command or shell.

Invariant: a machine where bubblewrap cannot build a sandbox — most often one that forbids a user
other than root to create user namespaces (``user.max_user_namespaces = 0``, Debian's older
``kernel.unprivileged_userns_clone = 0``, Ubuntu's AppArmor restriction, a container that filters
``clone``) — refuses each confined command and each confined ``shell_open`` with one error
(``SHELL_SPAWN``) that quotes bubblewrap, names the setting that forbids it and the fix. Before,
a one-shot command answered with bubblewrap's line as if it were the command's own output and
exit code, and a confined shell opened "ok" already dead. Nothing runs unconfined instead.

The probe runs ``true`` in a sandbox of the default policy at the command's working directory
(under the tracer when one is used, so that a tracer the machine forbids is found too). Success is
remembered for the life of the process, per ``bwrap`` path; a failure is not — the next confined
command asks again, so a machine fixed meanwhile (a sysctl changed, a limit no longer reached) is
used at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from tether.config import EnvSection
from tether.process.env import build_child_env
from tether.process.spawn import SpawnError, SpawnRequest, spawn
from tether.shell.sandbox.bwrap import SandboxRun
from tether.shell.sandbox.policy import DEFAULT_MODE, SandboxSettings, build_policy
from tether.shell.types import ShellException

_works: set[str] = set()  # bwrap paths that built a sandbox in this process

# The settings that forbid a user namespace to a user other than root: (name, the value that
# forbids it, what allows it). A kernel without one of them has no such setting.
_USERNS_SETTINGS = (
    ("user.max_user_namespaces", "0", "a number above 0"),
    ("kernel.unprivileged_userns_clone", "0", "1"),
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "1",
        "0, or an AppArmor profile that lets bwrap create them",
    ),
)


class Probe(NamedTuple):
    """What running ``true`` in a sandbox gave: ``ok``, else bubblewrap's complaint (``bwrap``
    true) or the tracer's (``bwrap`` false: the sandbox itself is fine)."""

    ok: bool
    bwrap: bool
    detail: str


async def probe(settings: SandboxSettings, *, home: Path, cwd: str, strace: str | None) -> Probe:
    """Run ``true`` in a sandbox of the default policy at ``cwd`` (under ``strace`` when given)."""
    run = SandboxRun(build_policy(settings, mode=DEFAULT_MODE, cwd=cwd, home=home), trace=strace is not None)
    try:
        argv = run.argv(settings.bwrap_path(), strace, ("true",))
        request = SpawnRequest(
            argv=argv, cwd=cwd, env=build_child_env(None, EnvSection()), pass_fds=run.pass_fds
        )
        process = spawn(request)
        await process.wait()
        failed = process.exit_code != 0
        detail = process.stderr.tail_text().strip()[-300:]
    except SpawnError as exc:
        failed, detail = True, str(exc)
    finally:
        run.cleanup()
    if not failed:
        return Probe(ok=True, bwrap=False, detail="")
    return Probe(ok=False, bwrap=detail.startswith("bwrap:"), detail=detail or "no message")


def _unproven(bwrap: str, cwd: str) -> bool:
    # One stat: a missing cwd is the caller's own error (SHELL_BAD_CWD), not bubblewrap's.
    return bwrap not in _works and os.path.isdir(cwd)


def known_usable(bwrap: str) -> bool:
    return bwrap in _works


def note_usable(bwrap: str) -> None:
    _works.add(bwrap)


async def ensure_usable(settings: SandboxSettings, *, home: Path, cwd: str) -> None:
    """Return once bubblewrap has built a sandbox in this process; else ``ShellException``
    (``SHELL_SPAWN``) saying why not and what to change. For a confined persistent shell, whose
    tracer is checked by its own collector."""
    bwrap = settings.bwrap_path()
    if not _unproven(bwrap, cwd):
        return
    found = await probe(settings, home=home, cwd=cwd, strace=None)
    if not found.ok:
        raise unusable(bwrap, found.detail)
    _works.add(bwrap)


def unusable(bwrap: str, detail: str) -> ShellException:
    """The error for a machine where bubblewrap (``bwrap``) cannot build a sandbox."""
    forbidding = []
    for name, forbids, allowed in _USERNS_SETTINGS:
        try:
            value = Path("/proc/sys", *name.split(".")).read_text().strip()
        except OSError:
            continue  # not a setting of this kernel
        if value == forbids:
            forbidding.append(f"{name} is {value} (allowed: {allowed})")
    cause = (
        "; this machine forbids it: " + "; ".join(forbidding)
        if forbidding
        else " (a container that forbids new namespaces, or a limit of namespaces reached)"
    )
    return ShellException(
        f"the sandbox cannot start on this machine: bubblewrap ({bwrap}) says {detail!r}. "
        "bubblewrap creates a user namespace for a user other than root"
        f"{cause}. Allow unprivileged user namespaces (sysctl, as root; in a container, its runtime), "
        'or run tether without the sandbox (no --sandbox, and [shell].provider not "sandbox"); '
        "nothing is run unconfined instead",
        code="SHELL_SPAWN",
    )
