"""The local providers: ``bash -c COMMAND`` and ``pwsh -NoProfile -NonInteractive -Command COMMAND``.

Invariant: ``resolve`` is the only place a default is applied (cwd, timeout capped at
``max_timeout_ms``, output budgets, grace, shell-env registry, executable); ``execute`` runs the
spec it is given. The command text is always exactly one argv element. The providers never touch
``subprocess`` themselves: spawning, capture and tree kill belong to ``tether.process``.

A ``ShellConfinement`` (e.g. bubblewrap) plugs in here: it wraps the provider argv at execute time
and reports denials once the process settled; the executor is then ``confining``.
"""

from __future__ import annotations

import os
import time
from abc import abstractmethod

from tether.errors import UsageError
from tether.process.env import build_child_env
from tether.process.spawn import SpawnError, SpawnRequest, spawn
from tether.shell.env_registry import ShellEnvContext, ShellEnvRegistry
from tether.shell.execution import LocalShellExecution, SettledShellExecution
from tether.shell.options import LocalShellOptions, discover_pwsh
from tether.shell.types import (
    AbortSignal,
    ShellAborted,
    ShellConfinement,
    ShellException,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
    ShellExecutor,
)

# (name, PATH) -> where it was found; re-checked with one access() call per use.
_which_cache: dict[tuple[str, str], str] = {}


def on_path(name: str, path: str) -> str | None:
    """Where ``shutil.which(name, path=path)`` finds a bare ``name`` on POSIX: in the first entry
    of ``path`` that holds an executable file of that name (not a directory), else None.

    Its own lines rather than shutil's: ``shutil`` (with the ``bz2``, ``lzma`` and ``zlib`` it
    imports) was ~3 ms of ``tether exec``'s start, for this one lookup."""
    if not path:
        return None
    seen: set[str] = set()
    for directory in path.split(os.pathsep):
        if directory in seen:
            continue
        seen.add(directory)
        candidate = os.path.join(directory, name)
        if os.path.exists(candidate) and os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


class LocalShellExecutor(ShellExecutor):
    """Shared resolve/execute of the local providers; subclasses only say how to build argv."""

    name = "shell"

    def __init__(
        self,
        options: LocalShellOptions | None = None,
        *,
        env_registry: ShellEnvRegistry | None = None,
        confinement: ShellConfinement | None = None,
        keep_background: bool = False,
    ) -> None:
        self.options = options or LocalShellOptions()
        self.env_registry = env_registry or ShellEnvRegistry()
        self.confinement = confinement
        self.keep_background = keep_background
        self.confining = confinement is not None

    @abstractmethod
    def executable(self) -> str:
        """The shell executable (configured path, or what the provider's discovery finds)."""

    @abstractmethod
    def argv(self, executable: str, command: str) -> tuple[str, ...]:
        """The launch argv, with ``command`` as exactly one element."""

    # -- resolve -------------------------------------------------------------------------------
    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        opts = self.options
        default_ms = min(opts.timeout_ms, opts.max_timeout_ms)
        if request.timeout_ms is not None and request.timeout_ms < 1:
            raise UsageError(
                f"timeout_ms must be a positive number of milliseconds (got {request.timeout_ms}); "
                f"omit it for the default {default_ms} ms, at most {opts.max_timeout_ms} ms"
            )
        if request.stdout_max_bytes is not None and request.stdout_max_bytes < 0:
            raise UsageError(f"stdout_max_bytes must be ≥ 0 (got {request.stdout_max_bytes})")
        workdir = os.path.expanduser(request.workdir or "")
        # An absolute workdir needs no base: this process's own directory may have been removed.
        # The configured default is a path as a person writes it (`~/projects`, `work`), made
        # absolute here so the spec names the directory the command runs in.
        base = "" if os.path.isabs(workdir) else os.path.expanduser(opts.cwd or "")
        if not os.path.isabs(workdir) and not os.path.isabs(base):
            base = os.path.join(_current_directory(), base)
        cwd = os.path.normpath(os.path.join(base, workdir))
        timeout_ms = min(request.timeout_ms, opts.max_timeout_ms) if request.timeout_ms else default_ms
        context = ShellEnvContext(command=request.command, cwd=cwd, session_id=request.session_id)
        env = {**self.env_registry.collect(context), **request.env}
        return ShellExecSpec(
            command=request.command,
            argv=self.argv(self.executable(), request.command),
            cwd=cwd,
            timeout_ms=timeout_ms,
            on_expiry=request.on_expiry,
            stdin=request.stdin,
            env=env,
            stdout_max_bytes=(
                request.stdout_max_bytes if request.stdout_max_bytes is not None else opts.max_output_bytes
            ),
            stderr_max_bytes=opts.max_output_bytes,
            max_spill_bytes=opts.max_spill_bytes,
            grace_ms=opts.grace_ms,
            resolved_at=time.monotonic(),
        )

    # -- execute -------------------------------------------------------------------------------
    async def execute(self, spec: ShellExecSpec, *, abort: AbortSignal | None = None) -> ShellExecution:
        if abort is not None and abort.fired:
            raise ShellAborted(f"execution aborted before it started: {abort.reason}")
        env = build_child_env(None, self.options.env, spec.env)
        # A few stat calls on local paths: not worth a thread hop on every command.
        executable: str | None = self._check_executable(
            spec.argv[0], os.fsdecode(env.get(b"PATH", os.defpath.encode()))
        )
        self._check_cwd(spec.cwd)
        if _expired(spec):
            # The deadline passed while preparing: settle timed out without spawning.
            return SettledShellExecution(timeout_ms=spec.timeout_ms, timed_out=True)
        argv, launch = spec.argv, None
        if self.confinement is not None:
            launch = await self.confinement.wrap(spec.argv, spec)
            if _expired(spec):
                # Wrapping is part of preparing (the sandbox snapshots repositories first): a
                # deadline that passed meanwhile settles the same way, the command never started.
                if launch.cleanup is not None:
                    launch.cleanup()
                return SettledShellExecution(timeout_ms=spec.timeout_ms, timed_out=True)
            argv, executable = launch.argv, None
            env.update({os.fsencode(k): os.fsencode(v) for k, v in launch.env.items()})
        request = SpawnRequest(
            argv=argv,
            executable=executable,
            cwd=spec.cwd,
            env=env,
            stdin=spec.stdin.encode() if spec.stdin is not None else None,
            stdout_max_bytes=spec.stdout_max_bytes,
            stderr_max_bytes=spec.stderr_max_bytes,
            max_spill_bytes=spec.max_spill_bytes,
            spill_dir=self.options.spill_directory(),
            grace_ms=spec.grace_ms,
            keep_background=self.keep_background,
            pass_fds=launch.pass_fds if launch is not None else (),
            bounds=launch.bounds if launch is not None else None,
        )
        try:
            process = spawn(request)
        except SpawnError as exc:
            if launch is not None and launch.cleanup is not None:
                launch.cleanup()
            failure = ShellException(str(exc), code="SHELL_SPAWN")
            return SettledShellExecution(timeout_ms=spec.timeout_ms, failure=failure)
        if launch is not None and launch.started is not None:
            launch.started(process.pid)
        return LocalShellExecution(process, spec, abort=abort, launch=launch)

    @staticmethod
    def _check_cwd(cwd: str) -> None:
        if not os.path.isdir(cwd):
            raise ShellException(
                f"working directory {cwd!r} does not exist or is not a directory; pass an existing "
                "workdir (a relative one is taken from [shell].cwd, else tether's own directory)",
                code="SHELL_BAD_CWD",
            )

    @staticmethod
    def _check_executable(executable: str, path: str) -> str:
        """Where the shell executable is (raises ``SHELL_MISSING`` when nowhere)."""
        hit: str | None = executable
        if os.sep in executable:
            found = os.path.isfile(executable) and os.access(executable, os.X_OK)
        else:
            hit = _which_cache.get((executable, path))
            found = hit is not None and os.access(hit, os.X_OK)
            if not found:
                hit = on_path(executable, path)
                found = hit is not None
                if hit is not None:
                    _which_cache[(executable, path)] = hit
        if found and hit is not None:
            return hit
        raise ShellException(
            f"shell executable {executable!r} cannot be found "
            f"({'no such executable file' if os.sep in executable else 'not on PATH'}); "
            f"install it or set [shell].executable in config.toml",
            code="SHELL_MISSING",
        )


class LocalBashExecutor(LocalShellExecutor):
    """``bash -c COMMAND``."""

    name = "bash"

    def executable(self) -> str:
        return self.options.executable or "bash"

    def argv(self, executable: str, command: str) -> tuple[str, ...]:
        return (executable, "-c", command)


class LocalPwshExecutor(LocalShellExecutor):
    """``pwsh -NoProfile -NonInteractive -Command COMMAND``, found by the spec's discovery chain."""

    name = "pwsh"

    def executable(self) -> str:
        return discover_pwsh(self.options.executable)

    def argv(self, executable: str, command: str) -> tuple[str, ...]:
        return (executable, "-NoProfile", "-NonInteractive", "-Command", command)


def _expired(spec: ShellExecSpec) -> bool:
    """The spec's deadline (counted from resolve) has passed."""
    return time.monotonic() >= spec.resolved_at + spec.timeout_ms / 1000


def _current_directory() -> str:
    """This process's working directory; ``SHELL_BAD_CWD`` once it was removed (``getcwd`` then
    fails with ENOENT: a ``tether exec`` typed in a directory deleted since, or a ``tether mcp``
    started in a project that was)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise ShellException(
            "the current working directory no longer exists (it was removed); cd to an existing "
            "directory, or pass an absolute workdir (tether exec: --cwd DIR)",
            code="SHELL_BAD_CWD",
        ) from None
