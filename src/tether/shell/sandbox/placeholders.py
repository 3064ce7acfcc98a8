"""Empty stand-ins for protected paths that do not exist yet, and their crash-safe removal.

Invariant: a placeholder exists on the host only while a sandbox uses it — a one-shot command of a
live tether process, or a confined persistent shell that still runs — and no sandbox loses one it
still uses. bubblewrap can mount only over something that exists, so protecting an absent
``~/.profile`` (or ``~/.ssh``, ``~/.config/systemd/user``) means creating an empty one — and any
missing parent directory — and binding it read-only; left behind, it would change what the
user's next login shell reads (an empty ``.bash_profile`` hides ``.profile``). Removing one that a
sandbox still uses would be worse: unlinking a mount point in another mount namespace detaches
the mount there (Linux ≥ 3.18), so the sandbox could then create the path. So:

- every use is listed in a *ledger* before the placeholder is created or bound: a process's
  ``TETHER_HOME/sandbox/placeholders.<pid>`` (rewritten on every change; counted within the
  process), or a persistent shell's ``TETHER_HOME/sandbox/shells/<id>/placeholders``
  (``ShellPlaceholders``; its first line names the pid the shell lives as). ``TETHER_HOME`` is
  hidden from sandboxed commands;
- a placeholder is removed only when no live ledger lists it, only while it is still empty (content
  someone wrote is never lost; a parent directory that was filled stays), and only if it is one:
  created by the ledger's owner (``c``), or carrying the ``user.tether.placeholder`` attribute
  tether sets on what it creates (``u``: reused from another sandbox). Checks and removals hold
  an ``flock`` on ``sandbox/placeholders.lock``, so two processes never race on one path;
- ``sweep_stale`` removes what the ledgers of dead owners (a process that crashed, a shell that
  ended) left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from tether.process.tree import alive

_MARK = "user.tether.placeholder"
_lock = threading.Lock()
_users: dict[str, int] = {}
_ledger_of: dict[str, tuple[Path, str]] = {}  # path → (state directory, "c" created / "u" reused)


def _ledger_dir(home: str) -> Path:
    return Path(home) / "sandbox"


@contextlib.contextmanager
def _cross_process(home: str) -> Iterator[None]:
    state = _ledger_dir(home)
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(state / "placeholders.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(ledger: Path, header: str, entries: list[tuple[str, str]]) -> None:
    if not entries and not header:
        with contextlib.suppress(FileNotFoundError):
            ledger.unlink()
        return
    ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = ledger.with_name(ledger.name + ".tmp")
    partial.write_text(header + "".join(f"{how} {p}\n" for p, how in entries))
    partial.replace(ledger)


def _write_ledger(state: Path) -> None:
    entries = [(path, how) for path, (owner, how) in _ledger_of.items() if owner == state]
    _write(state / f"placeholders.{os.getpid()}", "", entries)


def is_placeholder(path: str) -> bool:
    """An empty file or directory tether created as a stand-in (it carries tether's attribute)."""
    try:
        return bool(os.getxattr(path, _MARK, follow_symlinks=False)) and _empty(path)
    except OSError:
        return False


def _empty(path: str) -> bool:
    if os.path.islink(path):
        return False
    if os.path.isdir(path):
        try:
            return not os.listdir(path)
        except OSError:
            return False
    return os.path.isfile(path) and os.path.getsize(path) == 0


def _create(step: str, *, directory: bool, mode: int) -> None:
    if directory:
        os.mkdir(step, mode)
    else:
        os.close(os.open(step, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode))
    with contextlib.suppress(OSError):  # a filesystem without user attributes: only "c" entries count
        os.setxattr(step, _MARK, b"1", follow_symlinks=False)


def _steps(path: str) -> list[str] | None:
    """The missing parents of ``path`` (outermost first) and ``path``; None: nothing can go there."""
    missing: list[str] = []
    parent = os.path.dirname(path)
    while parent not in ("/", "") and not os.path.lexists(parent):
        missing.insert(0, parent)
        parent = os.path.dirname(parent)
    return [*missing, path] if os.path.isdir(parent) else None


def stand_in(
    path: str, *, kind: str, list_use: Callable[[str, str], None], held: Callable[[str], bool]
) -> list[str] | None:
    """Make something stand at ``path`` (an empty file, or a directory for ``kind="dir"``), with its
    missing parents; ``list_use(step, how)`` records each step in the caller's ledger *before* it
    is created; ``held(step)``: the caller already uses that step. Returns the steps used, or None
    when nothing can be created there."""
    steps = _steps(path)
    if steps is None:
        return None
    used: list[str] = []
    for step in steps:
        if os.path.lexists(step):
            if held(step) or is_placeholder(step):
                list_use(step, "u")
                used.append(step)
            continue
        list_use(step, "c")
        try:
            _create(step, directory=step != path or kind == "dir", mode=0o700 if step != path else 0o755)
        except FileExistsError:
            continue
        except OSError:
            return used or None
        used.append(step)
    return used


def acquire(path: str, *, kind: str, home: str) -> list[str] | None:
    """This process's use of a stand-in at ``path`` (see ``stand_in``); what it returns must be
    ``release``d (outermost first; empty when the path exists and is not a placeholder)."""
    state = _ledger_dir(home)
    with _lock, _cross_process(home):
        held: list[str] = []

        def list_use(step: str, how: str) -> None:
            if step in _users:
                return
            _ledger_of[step] = (state, how)
            _write_ledger(state)

        steps = stand_in(path, kind=kind, list_use=list_use, held=_users.__contains__)
        for step in steps or ():
            _users[step] = _users.get(step, 0) + 1
            held.append(step)
        # Listed but not used (it failed, or someone else created it meanwhile): not ours.
        for step in [s for s, (owner, _) in _ledger_of.items() if owner == state and s not in _users]:
            del _ledger_of[step]
        _write_ledger(state)
        return held if steps is not None else None


def release(paths: list[str]) -> None:
    with _lock:
        gone: list[tuple[str, str, Path]] = []
        for path in reversed(paths):
            _users[path] -= 1
            if _users[path] > 0:
                continue
            del _users[path]
            state, how = _ledger_of.pop(path)
            gone.append((path, how, state))
        for state in {state for _, _, state in gone}:
            with _cross_process(str(state.parent)):
                _write_ledger(state)
                for path, how, _ in [g for g in gone if g[2] == state]:
                    _remove_unused(path, how, state)


def _live_entries(state: Path) -> set[str]:
    """Every path a live ledger under ``state`` lists (this process's counted uses included)."""
    listed = set(_users)
    ledgers = [*state.glob("placeholders.*"), *state.glob("shells/*/placeholders")]
    for ledger in ledgers:
        if ledger.suffix in (".lock", ".tmp"):
            continue
        owner = _owner(ledger)
        if owner is None or owner == os.getpid() or not alive(owner):
            continue
        listed.update(path for _, path in _entries(ledger))
    return listed


def _owner(ledger: Path) -> int | None:
    if ledger.name.startswith("placeholders."):
        pid = ledger.name.split(".", 1)[1]
        return int(pid) if pid.isdigit() else None
    try:
        first = ledger.read_text().split("\n", 1)[0]
    except OSError:
        return None
    pid = first.removeprefix("pid ")
    return int(pid) if first.startswith("pid ") and pid.isdigit() else None


def _entries(ledger: Path) -> list[tuple[str, str]]:
    try:
        lines = ledger.read_text().splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        how, _, path = line.partition(" ")
        if how in ("c", "u") and path.startswith("/"):
            entries.append((how, path))
        elif line.startswith("/"):  # the ledger format of earlier versions: paths it created
            entries.append(("c", line))
    return entries


def _remove_unused(path: str, how: str, state: Path) -> None:
    if path in _live_entries(state):
        return
    if how == "u" and not is_placeholder(path):
        return
    remove_if_empty(path)


def remove_if_empty(path: str) -> None:
    # Only an empty placeholder is ours to remove; anything with content was put there by someone.
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            return
        if os.path.isdir(path):
            os.rmdir(path)  # fails unless empty
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)


class ShellPlaceholders:
    """The stand-ins of one confined persistent shell, listed in its own ledger for its whole life.

    ``hold`` while building the shell's sandbox (the ledger names this process until
    ``owned_by(pid)`` names the pane's process); ``release`` once the shell has ended.
    """

    def __init__(self, ledger: Path, *, home: str) -> None:
        self.ledger = ledger
        self.home = home
        self._entries: list[tuple[str, str]] = []
        self._pid = os.getpid()

    def hold(self, path: str, *, kind: str) -> None:
        with _cross_process(self.home):

            def list_use(step: str, how: str) -> None:
                if all(step != p for p, _ in self._entries):
                    self._entries.append((step, how))
                    self._save()

            stand_in(
                path, kind=kind, list_use=list_use, held=lambda step: any(step == p for p, _ in self._entries)
            )

    def owned_by(self, pid: int) -> None:
        """The shell now lives as ``pid`` (its pane's process): the ledger is live while it is."""
        self._pid = pid
        with _cross_process(self.home):
            self._save()

    def _save(self) -> None:
        _write(self.ledger, f"pid {self._pid}\n", self._entries)

    @staticmethod
    def release(ledger: Path, *, home: str) -> None:
        """Drop the shell's ledger and remove what no other live sandbox uses (idempotent)."""
        state = _ledger_dir(home)
        with _cross_process(home):
            entries = _entries(ledger)
            with contextlib.suppress(FileNotFoundError):
                ledger.unlink()
            for how, path in reversed(entries):
                _remove_unused(path, how, state)


def sweep_stale(home: str) -> int:
    """Remove the placeholders whose ledgers' owners are gone (a tether process that died holding
    them, a confined shell that ended); returns how many ledgers were swept."""
    state = _ledger_dir(home)
    if not state.is_dir():
        return 0
    swept = 0
    with _cross_process(home):
        ledgers = [*state.glob("placeholders.*"), *state.glob("shells/*/placeholders")]
        for ledger in ledgers:
            if ledger.suffix in (".lock", ".tmp"):
                continue
            owner = _owner(ledger)
            if owner is not None and (owner == os.getpid() or alive(owner)):
                continue
            entries = _entries(ledger)
            with contextlib.suppress(OSError):
                ledger.unlink()
            # Innermost first: a parent the owner created goes only once its contents did.
            for how, path in reversed(entries):
                _remove_unused(path, how, state)
            swept += 1
    return swept
