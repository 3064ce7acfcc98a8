"""Empty stand-ins for protected paths that do not exist yet, and their crash-safe removal.

Invariant: a placeholder exists on the host only while a sandboxed command of a live tether
process uses it. bubblewrap can mount only over something that exists, so protecting an absent
``~/.profile`` (or ``~/.ssh``, ``~/.config/systemd/user``) means creating an empty one — and any
missing parent directory — and binding it read-only; left behind, it would change what the
user's next login shell reads (an empty ``.bash_profile`` hides ``.profile``). So:

- placeholders are shared and counted within a process (two commands, one placeholder);
- the last user removes it — only if it is still empty, so content someone wrote is never lost
  (a parent directory the command filled with other files stays);
- each process lists the placeholders it holds in ``TETHER_HOME/sandbox/placeholders.<pid>``
  (rewritten on every change; ``TETHER_HOME`` is hidden from sandboxed commands), and
  ``sweep_stale`` removes what a process that died without cleaning up left behind.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

_lock = threading.Lock()
_users: dict[str, int] = {}
_ledger_of: dict[str, Path] = {}


def _ledger_dir(home: str) -> Path:
    return Path(home) / "sandbox"


def _write_ledger(state: Path) -> None:
    paths = [path for path, owner in _ledger_of.items() if owner == state]
    ledger = state / f"placeholders.{os.getpid()}"
    if not paths:
        with contextlib.suppress(FileNotFoundError):
            ledger.unlink()
        return
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = ledger.with_suffix(".tmp")
    partial.write_text("".join(f"{p}\n" for p in paths))
    partial.replace(ledger)


def acquire(path: str, *, kind: str, home: str) -> list[str] | None:
    """Make sure something stands at ``path`` (an empty file, or an empty directory for
    ``kind="dir"``), creating missing parent directories first. Returns what this call holds and
    must ``release`` (outermost first; empty when everything already existed), or None when
    nothing can be created there (the command could not create it either)."""
    with _lock:
        missing: list[str] = []
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not os.path.lexists(parent):
            missing.insert(0, parent)
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            return None
        held: list[str] = []
        for step in [*missing, path]:
            if step in _users:
                _users[step] += 1
                held.append(step)
                continue
            state = _ledger_dir(home)
            # Listed before it exists: a crash between the two leaves a ledger entry, never an orphan.
            _ledger_of[step] = state
            _write_ledger(state)
            try:
                if step != path or kind == "dir":
                    os.mkdir(step, 0o700 if step != path else 0o755)
                else:
                    os.close(os.open(step, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            except OSError as exc:
                del _ledger_of[step]
                _write_ledger(state)
                if isinstance(exc, FileExistsError):
                    continue  # created by someone else meanwhile: use what is there (not ours to remove)
                _release(held)
                return None
            _users[step] = 1
            held.append(step)
        return held


def release(paths: list[str]) -> None:
    with _lock:
        _release(paths)


def _release(paths: list[str]) -> None:
    for path in reversed(paths):
        _users[path] -= 1
        if _users[path] > 0:
            continue
        del _users[path]
        remove_if_empty(path)
        state = _ledger_of.pop(path, None)
        if state is not None:
            _write_ledger(state)


def remove_if_empty(path: str) -> None:
    # Only an empty placeholder is ours to remove; anything with content was put there by someone.
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            return
        if os.path.isdir(path):
            os.rmdir(path)  # fails unless empty
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(home: str) -> int:
    """Remove the placeholders of tether processes that died holding them; returns how many ledgers."""
    state = _ledger_dir(home)
    swept = 0
    for ledger in state.glob("placeholders.*") if state.is_dir() else ():
        pid_text = ledger.name.split(".", 1)[1]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            # Innermost first: a parent the process created goes only once its contents did.
            for line in reversed(ledger.read_text().splitlines()):
                if line.strip():
                    remove_if_empty(line.strip())
            ledger.unlink()
            swept += 1
    return swept
