"""Deployment defaults of the local providers (spec ``LocalShellOptions``) and the pwsh discovery chain.

Invariant: every default the executor applies lives here and is applied only by ``resolve``;
``execute`` never re-applies one. Defaults: ``cwd`` = the process's working directory,
``timeout_ms`` 120000, ``max_timeout_ms`` 600000, ``max_output_bytes`` 64000 per stream,
``max_spill_bytes`` 64 MiB per stream, ``grace_ms`` 3000, ``executable`` none (resolve ``bash`` /
``pwsh``).
"""

from __future__ import annotations

import contextlib
import functools
import ntpath
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.config import MIB, Config, EnvSection, resolve_home


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalShellOptions:
    cwd: str | None = None  # None = os.getcwd() at resolve time
    timeout_ms: int = 120_000
    max_timeout_ms: int = 600_000
    max_output_bytes: int = 64_000
    max_spill_bytes: int = 64 * MIB
    grace_ms: int = 3_000
    executable: str | None = None
    # Where spill files go ($TETHER_HOME/spill when None), and how child envs are scrubbed.
    spill_dir: Path | None = None
    env: EnvSection = field(default_factory=EnvSection)

    @classmethod
    def from_config(cls, config: Config) -> LocalShellOptions:
        shell = config.shell
        return cls(
            cwd=shell.cwd or None,
            timeout_ms=shell.timeout_ms,
            max_timeout_ms=shell.max_timeout_ms,
            max_output_bytes=shell.max_output_bytes,
            max_spill_bytes=shell.max_spill_bytes,
            grace_ms=shell.grace_ms,
            executable=shell.executable or None,
            spill_dir=config.home / "spill",
            env=config.env,
        )

    def spill_directory(self) -> Path | None:
        """The spill directory, created on demand; None when spilling is disabled."""
        if self.max_spill_bytes <= 0:
            return None
        if self.spill_dir is not None:
            return _ensured(self.spill_dir)
        return _ensured(_default_spill_dir(os.environ.get("TETHER_HOME", "")))


@functools.lru_cache(maxsize=16)
def _default_spill_dir(home_env: str) -> Path:
    del home_env  # the cache key: resolve_home reads the same variable
    return resolve_home() / "spill"


# The directory's mtime after its last prune, per path: unchanged means no file was added since.
_pruned_at: dict[Path, int] = {}


def _ensured(path: Path) -> Path:
    """``path`` created and pruned; this runs on every execute, so it costs one ``stat`` then.

    A long-lived server (``tether serve``, days) adds spill files all the time: pruning only at
    its first command let them pile up without bound. The directory's mtime changes when a file is
    created in it, so a prune runs again only after that (at most one file behind, when a spill
    lands within the same clock tick as the last prune's end).
    """
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        mtime = -1
    if _pruned_at.get(path) != mtime:
        prune_spill(path)
        with contextlib.suppress(OSError):
            _pruned_at[path] = path.stat().st_mtime_ns
    return path


SPILL_MAX_AGE_S = 24 * 3600
SPILL_MAX_FILES = 256


def prune_spill(path: Path, *, max_age_s: float = SPILL_MAX_AGE_S, max_files: int = SPILL_MAX_FILES) -> int:
    """Delete spill files older than ``max_age_s``, then the oldest beyond ``max_files``.

    Spill files exist so a model can read a long output after the fact; a day is long enough for
    that, and the count cap bounds the disk a busy server uses (each file ≤ max_spill_bytes).
    Returns how many files were removed.
    """
    try:
        entries = [(entry.stat().st_mtime, entry) for entry in path.iterdir() if entry.is_file()]
    except OSError:
        return 0
    entries.sort()
    cutoff = time.time() - max_age_s
    doomed = [entry for mtime, entry in entries if mtime < cutoff]
    survivors = [entry for mtime, entry in entries if mtime >= cutoff]
    doomed += survivors[: max(0, len(survivors) - max_files)]
    removed = 0
    for entry in doomed:
        with contextlib.suppress(OSError):
            entry.unlink()
            removed += 1
    return removed


def discover_pwsh(
    explicit: str | None,
    *,
    platform: str = sys.platform,
    environ: Mapping[str, str] | None = None,
    exists: Callable[[str], bool] = os.path.isfile,
) -> str:
    """The pwsh executable to run, by the spec's chain (first hit wins).

    1. an explicit configured path;
    2. on Windows: ``%ProgramFiles%\\PowerShell\\7\\pwsh.exe``, then ``pwsh.exe`` in each PATH entry,
       then ``%SystemRoot%\\System32\\WindowsPowerShell\\v1.0\\powershell.exe``;
    3. the bare name ``pwsh``, left to the PATH search of the process layer.
    """
    if explicit:
        return explicit
    env = os.environ if environ is None else environ
    if platform.startswith("win"):
        candidates: list[str] = []
        program_files = env.get("ProgramFiles")
        if program_files:
            candidates.append(ntpath.join(program_files, "PowerShell", "7", "pwsh.exe"))
        for entry in env.get("PATH", "").split(";"):
            if entry.strip():
                candidates.append(ntpath.join(entry.strip(), "pwsh.exe"))
        system_root = env.get("SystemRoot")
        if system_root:
            candidates.append(
                ntpath.join(system_root, "System32", "WindowsPowerShell", "v1.0", "powershell.exe")
            )
        for candidate in candidates:
            if exists(candidate):
                return candidate
    return "pwsh"
