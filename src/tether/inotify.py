"""inotify: a descriptor watching one directory, and the file names a batch of its events carries.

Invariant: a watch is non-blocking and close-on-exec (no child inherits it), and ``changed`` reads
every event already queued, so one wake-up of the event loop sees the whole batch; when the kernel
dropped events (its queue overflowed, or the read failed) it says so, and the caller must treat
every file as changed. The callers: the shells' log wake-ups (``shells.wakeups``), the lock
holders' close watch (``store.close_watch``) and a confined shell's keeper (``shell.sandbox.keeper``,
handed this file by the pane's launcher, which loads it by its path: it imports only the standard
library).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from pathlib import Path
from typing import Final

IN_MODIFY: Final = 0x00000002
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_Q_OVERFLOW: Final = 0x00004000
IN_ONLYDIR: Final = 0x01000000
_IN_NONBLOCK: Final = 0o4000
_IN_CLOEXEC: Final = 0o2000000
_EVENT: Final = struct.Struct("iIII")
_READ: Final = 65536
_EVENT_MAX: Final = _EVENT.size + 256  # a name of NAME_MAX (255) bytes, NUL-padded to 16 bytes

# What ``open_watch`` fails with when the user (or the process) has no inotify instance or watch
# left: a condition of the machine, with a fix (``limits_hint``), not a bug.
EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC})

_libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter already runs on (no ldconfig)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


def open_instance() -> int:
    """A new inotify descriptor watching nothing yet (``add_watch``); ``OSError`` when the user has
    no instance left."""
    fd = int(_libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"inotify_init1: {os.strerror(err)}")
    return fd


def open_watch(directory: Path | str, mask: int) -> int:
    """A descriptor reporting ``mask`` events of the files in ``directory``; ``OSError`` (with the
    kernel's errno) when inotify has no instance or watch left, or the directory cannot be watched."""
    fd = open_instance()
    try:
        add_watch(fd, directory, mask)
    except OSError:
        os.close(fd)
        raise
    return fd


def add_watch(fd: int, directory: Path | str, mask: int) -> int:
    """Watch one more directory on ``fd``: its watch descriptor (the same one again for a directory
    already watched there; a new one once the path names another directory)."""
    wd = int(_libc.inotify_add_watch(fd, os.fsencode(directory), mask))
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
    return wd


def changed(fd: int, mask: int) -> tuple[set[bytes], bool]:
    """The names of the files with a ``mask`` event among those queued on ``fd``, and whether
    events were lost (then every file may have changed)."""
    found, lost = events(fd, mask)
    return {name for _wd, name in found}, lost


def events(fd: int, mask: int) -> tuple[set[tuple[int, bytes]], bool]:
    """``changed`` for a descriptor watching several directories: (watch descriptor, name) pairs."""
    found: set[tuple[int, bytes]] = set()
    lost = False
    while True:
        try:
            data = os.read(fd, _READ)
        except BlockingIOError:
            break
        except OSError:
            lost = True
            break
        if not data:
            break
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, event_mask, _cookie, length = _EVENT.unpack_from(data, pos)
            raw = data[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0")
            pos += _EVENT.size + length
            if event_mask & IN_Q_OVERFLOW:
                lost = True
            elif event_mask & mask and raw:
                found.add((wd, raw))
        if len(data) <= _READ - _EVENT_MAX:
            # The kernel stops a read only at an event that does not fit: room for the largest
            # left over means the queue was empty (a read more would only fail with EAGAIN).
            break
    return found, lost


def limits_hint() -> str:
    """How to give this user more inotify instances and watches, with the limits now."""
    now = []
    for name in ("max_user_instances", "max_user_watches"):
        try:
            value = Path(f"/proc/sys/fs/inotify/{name}").read_text(encoding="ascii").strip()
        except OSError:
            value = "?"
        now.append(f"fs.inotify.{name} = {value}")
    return (
        f"raise the limits ({', '.join(now)}; e.g. sysctl -w fs.inotify.max_user_instances=512), "
        "or end other programs that watch files"
    )
