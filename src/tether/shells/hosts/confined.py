"""Confined persistent shells on the local host: the pane's shell and its whole tree in bubblewrap.

Invariant: a shell's confinement is decided once, when it opens, and carried by its record
(``Confinement``, JSON in ``shells.confinement``), so every tether process sharing the home — an
unconfined ``tether serve`` included — starts, respawns and reports on it the same way, and a
confined shell never reopens unconfined: respawning one needs bubblewrap, or fails saying so.
``require_escalated`` is recorded too (an unconfined shell someone granted), so a confining
deployment can tell it from a shell opened before it confined.

What confining adds to a local pane (``ConfinedPanes``), all on the host side, outside the
sandbox, under ``TETHER_HOME/sandbox/shells/<id>`` (masked inside):

- the pane runs the launcher of ``tether.shell.confine_interactive`` instead of bash; the shell's
  start-up file sits in ``rc/`` there, bound read-only at ``/run/tether-shell``;
- the shell's tree runs under strace for its whole life, and the integration's prompt hook marks
  the end of each command (``mark=True``), so the collector files each run's failed calls under
  its token; after a run, ``report`` waits for that file (inotify, never polling), runs the
  repository check, and returns the run's ``ShellSandboxInfo``;
- the pane's pid is bubblewrap's, so process facts start from the shell inside (``shell_pid``),
  and so does the ``file`` wait: the path as the shell sees it (``exists``, ``hosts.inside``);
- placeholders are owned by the sandbox's init process, and released once it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from tether.errors import UsageError
from tether.home import replace_file
from tether.shell import (
    DEFAULT_MODE,
    PERMISSION_MODES,
    ConfinedShell,
    ExtraBind,
    PermissionMode,
    SandboxSettings,
    ShellSandboxDenial,
    ShellSandboxInfo,
    confine_interactive,
    ensure_sandbox_usable,
    mark_path,
    sweep_placeholders,
)
from tether.shells.hosts.inside import exists_inside
from tether.shells.integration.script import integration_script
from tether.store.close_watch import CloseWatch

logger = logging.getLogger(__name__)

RC_MOUNT: Final = "/run/tether-shell"
RC_NAME: Final = "bashrc"
# The one place a confined shell writes outside its roots: its own state for the guard (what it
# has defined), rewritten at every prompt. Its own directory, bound writable; read by the host with
# O_NOFOLLOW, so a link planted there never makes the host read or create anything else.
LIVE_MOUNT: Final = "/run/tether-shell-live"
LIVE_STATE: Final = f"{LIVE_MOUNT}/shell.state"
_REPORT_WAIT_S: Final = 10.0  # the trace file follows the prompt by microseconds; this is for a stalled host
_END_WAIT_S: Final = 5.0
_WRAPPERS: Final = frozenset({"bwrap", "strace"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Confinement:
    """How one shell is confined: its mode, the ``[sandbox]`` settings it started with, and who
    granted a mode wider than the default (``granted_by``: "" for the default, ``config`` or the
    person who approved)."""

    mode: PermissionMode
    settings: SandboxSettings
    granted_by: str = ""
    justification: str = ""

    @property
    def sandboxed(self) -> bool:
        return self.mode != "require_escalated"

    def to_json(self) -> str:
        return json.dumps(
            {
                "mode": self.mode,
                "settings": dataclasses.asdict(self.settings),
                "granted_by": self.granted_by,
                "justification": self.justification,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Confinement | None:
        """The record's value ("" = an unconfined shell nobody granted); a value this version
        cannot read is an error, never "unconfined"."""
        if not text:
            return None
        try:
            data: dict[str, Any] = json.loads(text)
            mode = next(m for m in PERMISSION_MODES if m == data["mode"])
            raw = data["settings"]
            settings = SandboxSettings(
                writable_roots=_strings(raw["writable_roots"]),
                allow_escalations=_strings(raw["allow_escalations"]),
                read_only_paths=_strings(raw["read_only_paths"]),
                hidden_paths=_strings(raw["hidden_paths"]),
                bwrap=str(raw["bwrap"]),
                trace=bool(raw["trace"]),
                allow_unix_sockets=bool(raw["allow_unix_sockets"]),
                # A record written before the size existed: the default, never unbounded.
                tmpfs_size_mb=int(raw.get("tmpfs_size_mb", SandboxSettings().tmpfs_size_mb)),
                # A record written before the bounds existed: the defaults, as its launcher read them
                # (its spec says whether it joined any).
                max_processes=int(raw.get("max_processes", SandboxSettings().max_processes)),
                memory_mb=int(raw.get("memory_mb", SandboxSettings().memory_mb)),
            )
        except (ValueError, KeyError, TypeError, StopIteration) as exc:
            raise UsageError(
                f"a shell record's confinement cannot be read ({exc}); close the shell and open a new one"
            ) from exc
        return cls(
            mode=mode,
            settings=settings,
            granted_by=str(data.get("granted_by", "")),
            justification=str(data.get("justification", "")),
        )

    def summary(self) -> str:
        if not self.sandboxed:
            return f"unconfined (require_escalated, granted by {self.granted_by or 'configuration'})"
        return self.mode if self.mode == DEFAULT_MODE else f"{self.mode} (granted by {self.granted_by})"


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"not a list of strings: {value!r}")
    return tuple(value)


def default_confinement(settings: SandboxSettings) -> Confinement:
    return Confinement(mode=DEFAULT_MODE, settings=settings)


class ConfinedPanes:
    """The confined shells of one local host (``home`` = its ``TETHER_HOME``)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "sandbox" / "shells"
        self._root = str(self.root)
        self._attached: dict[str, ConfinedShell] = {}
        self._inner: dict[int, int] = {}

    def state_dir(self, shell_id: str) -> Path:
        return self.root / shell_id

    def is_confined(self, shell_id: str) -> bool:
        # A string path: asked several times per call, where pathlib costs more than the stat.
        return os.path.isdir(f"{self._root}/{shell_id}")

    def rc_path(self, shell_id: str) -> Path:
        return self.state_dir(shell_id) / "rc" / RC_NAME

    def state_files(self, shell_id: str) -> tuple[Path, Path]:
        """The shell's state and report files (``LIVE_STATE``), as the host sees them."""
        live = self.state_dir(shell_id) / "live"
        return live / "shell.state", live / "shell.report"

    def write_rc(self, shell_id: str, text: str) -> str:
        """The start-up file where the confined shell reads it; the path as seen inside."""
        path = self.rc_path(shell_id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_file(path, text.encode("utf-8"))  # the directory is bound: the shell sees the new file
        return f"{RC_MOUNT}/{RC_NAME}"

    async def ensure_usable(self, cwd: str, confinement: Confinement) -> None:
        """Before a confined pane starts: bubblewrap can build a sandbox on this machine, else the
        open (or respawn) is refused with why (``SHELL_SPAWN``), not a pane that is dead at once."""
        await ensure_sandbox_usable(confinement.settings, home=self.home, cwd=cwd)

    def command(
        self, shell_id: str, *, shell: str, cwd: str, rc_text: str, nonce: str, confinement: Confinement
    ) -> str:
        """The pane command that starts ``shell`` confined (a fresh sandbox: respawn calls it too)."""
        if not confinement.sandboxed:
            raise UsageError("an unconfined shell has no confined pane command")
        state = self.state_dir(shell_id)
        self.write_rc(shell_id, rc_text)
        (state / "live").mkdir(mode=0o700, exist_ok=True)
        confined = confine_interactive(
            confinement.settings,
            home=self.home,
            cwd=cwd,
            command=[shell, "--rcfile", f"{RC_MOUNT}/{RC_NAME}", "-i"],
            state_dir=state,
            mode=confinement.mode,
            extra_binds=[
                ExtraBind(source=str(state / "rc"), dest=RC_MOUNT),
                ExtraBind(source=str(state / "live"), dest=LIVE_MOUNT, writable=True),
            ],
            mark_nonce=nonce,
        )
        self._attached[shell_id] = confined
        return confined.shell_command()

    def started(self, shell_id: str, pane_pid: int) -> None:
        """The pane runs: its sandbox's init process owns the shell's placeholders from now on."""
        confined = self._attached.get(shell_id)
        if confined is None:
            return
        confined.owned_by(self._init_pid(pane_pid) or pane_pid)

    def attach(self, shell_id: str, cwd: str, confinement: Confinement) -> ConfinedShell:
        found = self._attached.get(shell_id)
        if found is None:
            found = ConfinedShell.attach(
                self.state_dir(shell_id), confinement.settings, home=self.home, cwd=cwd, mode=confinement.mode
            )
            self._attached[shell_id] = found
        return found

    # ---- after a run ----------------------------------------------------------------------------

    async def report(
        self, shell_id: str, cwd: str, confinement: Confinement, *, token: int, ended: bool, output: str
    ) -> ShellSandboxInfo:
        """A run's denials (its trace file, once it exists, when the run ended at a prompt), its
        output's filter refusals, and what the repository check neutralised."""
        confined = self.attach(shell_id, cwd, confinement)
        trace = await self._trace(confined, token) if ended and confined.traced else None
        try:
            repositories = await asyncio.to_thread(confined.check_repositories)
        except Exception as exc:  # never a traceback: say what could not be checked
            logger.exception("sandbox: checking the repositories after a run in %s failed", shell_id)
            repositories = (
                ShellSandboxDenial(
                    kind="git",
                    target=confined.policy.cwd,
                    detail=f"repositories could not be checked after the command ({exc}); "
                    "inspect .git/hooks and .git/config before running git here",
                ),
            )
        return confined.report(trace=trace, output=output, repositories=repositories)

    async def _trace(self, confined: ConfinedShell, token: int) -> str | None:
        found = confined.run_trace(token)
        if found is not None:
            return found
        path = confined.run_file(token)
        event = CloseWatch.register(path.parent, path.name)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _REPORT_WAIT_S
            step = 0.005
            while (found := confined.run_trace(token)) is None and loop.time() < deadline:
                # inotify wakes this at the collector's close; without inotify, a bounded back-off.
                wait = event.wait() if event is not None else asyncio.sleep(step)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wait, timeout=max(0.001, min(deadline - loop.time(), 1.0)))
                if event is not None:
                    event.clear()
                step = min(step * 2, 0.2)
            return found
        finally:
            if event is not None:
                CloseWatch.unregister(path.parent, path.name, event)

    async def check(self, shell_id: str, cwd: str, confinement: Confinement) -> None:
        """The repository check alone (a person's commands, the idle sweep, before closing)."""
        confined = self.attach(shell_id, cwd, confinement)
        denials = await asyncio.to_thread(confined.check_repositories)
        for denial in denials:
            logger.warning(
                "sandbox: shell %s: %s %s (%s)", shell_id, denial.kind, denial.target, denial.detail
            )

    # ---- the end of a shell -----------------------------------------------------------------------

    async def ended(self, shell_id: str, pane_pid: int | None) -> None:
        """The shell's session is gone or going: once its sandbox has ended, its placeholders and
        state go too (a sandbox still ending after ``_END_WAIT_S`` is left to the sweep)."""
        self._attached.pop(shell_id, None)
        state = self.state_dir(shell_id)
        if not state.is_dir():
            return
        init = self._init_pid(pane_pid) if pane_pid else None
        for pid in (init, pane_pid):
            if pid and not await _gone(pid, _END_WAIT_S):
                return
        ConfinedShell.release(state, home=self.home)

    def sweep(self, live: Callable[[str], bool]) -> None:
        """Release the state of confined shells that are no longer live (their sandbox gone)."""
        sweep_placeholders(str(self.home))
        for state in self.root.glob("dsh-*") if self.root.is_dir() else ():
            if live(state.name) or (state / "placeholders").exists():
                continue
            ConfinedShell.release(state, home=self.home)

    # ---- process facts ------------------------------------------------------------------------------

    def shell_pid(self, shell_id: str, pane_pid: int) -> int:
        """The shell the pane runs: the pane's own process (a shell opened unconfined), or the
        first process inside its sandbox that is neither bubblewrap nor the tracer."""
        if not self.is_confined(shell_id):
            return pane_pid
        known = self._inner.get(pane_pid)
        if known is not None and _session_of(known) == pane_pid:
            return known
        inner = _inner_shell(pane_pid)
        if inner is None:
            return pane_pid
        self._inner[pane_pid] = inner
        return inner

    def exists(self, shell_id: str, pane_pid: int, path: str) -> bool:
        """Whether ``path`` exists as the confined shell sees it (``hosts.inside``); ``False``
        while there is no shell inside to look through (starting, or gone)."""
        inner = self.shell_pid(shell_id, pane_pid)
        return inner != pane_pid and exists_inside(inner, path)

    def _init_pid(self, pane_pid: int) -> int | None:
        try:
            children = psutil.Process(pane_pid).children()
        except psutil.Error:
            return None
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.name() == "bwrap" and _session_of(child.pid) == pane_pid:
                    return int(child.pid)
        return None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[3]) if len(fields) > 3 else None


def _inner_shell(pane_pid: int) -> int | None:
    if _comm(pane_pid) != "bwrap":
        return None
    try:
        # Breadth first: bubblewrap → its init → the shell (the tracer is the shell's sibling). Only
        # the pane's session counts: the trace collector is the launcher's child in its own session.
        queue = [psutil.Process(pane_pid)]
        while queue:
            proc = queue.pop(0)
            for child in proc.children():
                if _session_of(child.pid) != pane_pid:
                    continue
                name = child.name()
                if name not in _WRAPPERS:
                    return int(child.pid)
                if name == "bwrap":
                    queue.append(child)
    except psutil.Error:
        return None
    return None


async def _gone(pid: int, timeout_s: float) -> bool:
    """Wait (on a pidfd, no polling) until process ``pid`` has exited; False after ``timeout_s``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_reader(fd, done.set)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=timeout_s)
        return done.is_set()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def rc_text(nonce: str, confinement: Confinement | None) -> str:
    """A shell's start-up file: a confined one marks the end of each command for its tracer and
    keeps its state for the guard in its one writable place (``LIVE_MOUNT``)."""
    if confinement is None or not confinement.sandboxed:
        return integration_script(nonce)
    return integration_script(nonce, mark=mark_path(nonce), state=LIVE_STATE)
