"""Empty stand-ins for protected paths that do not exist yet, and their crash-safe removal.

Invariant: a placeholder exists on the host only while a sandboxed command of a live tether
process uses it. bubblewrap can mount only over something that exists, so protecting an absent
``~/.profile`` means creating an empty one and binding it read-only; left behind, it would change
what the user's next login shell reads (an empty ``.bash_profile`` hides ``.profile``). So:

- placeholders are shared and counted within a process (two commands, one placeholder);
- the last user removes it — only if it is still empty, so content someone wrote is never lost;
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


def acquire(path: str, *, home: str) -> bool:
    """Make sure an empty stand-in exists at ``path``; False when nothing can be created there."""
    with _lock:
        if path in _users:
            _users[path] += 1
            return True
        state = _ledger_dir(home)
        # Listed before it exists: a crash between the two leaves a ledger entry, never an orphan.
        _ledger_of[path] = state
        _write_ledger(state)
        try:
            if path.endswith("/.git/hooks"):
                os.mkdir(path, 0o755)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as exc:
            del _ledger_of[path]
            _write_ledger(state)
            # Created by someone else meanwhile: bind what is there (not ours to remove).
            return isinstance(exc, FileExistsError) and os.path.lexists(path)
        _users[path] = 1
        return True


def release(path: str) -> None:
    with _lock:
        _users[path] -= 1
        if _users[path] > 0:
            return
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
            for line in ledger.read_text().splitlines():
                if line.strip():
                    remove_if_empty(line.strip())
            ledger.unlink()
            swept += 1
    return swept
