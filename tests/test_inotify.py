"""inotify: a watch reports the files its mask names, whole batches at once, and no child gets it."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from tether import inotify


def test_a_watch_names_the_files_written_and_only_for_its_mask(tmp_path: Path) -> None:
    fd = inotify.open_watch(tmp_path, inotify.IN_CLOSE_WRITE)
    try:
        assert inotify.changed(fd, inotify.IN_CLOSE_WRITE) == (set(), False)  # nothing yet, no wait
        (tmp_path / "c.log").touch()
        inotify.changed(fd, inotify.IN_CLOSE_WRITE)  # the touch's own close
        for name in ("a.log", "b.log", "a.log"):
            (tmp_path / name).write_bytes(b"x")
        (tmp_path / "c.log").open("rb").close()  # closed without writing: not a CLOSE_WRITE
        assert inotify.changed(fd, inotify.IN_CLOSE_WRITE) == ({b"a.log", b"b.log"}, False)
        assert inotify.changed(fd, inotify.IN_CLOSE_WRITE) == (set(), False)  # the batch was read whole
        (tmp_path / "d.log").write_bytes(b"x")
        assert inotify.changed(fd, inotify.IN_CREATE) == (set(), False)  # not subscribed, not reported
    finally:
        os.close(fd)


def test_a_watch_never_blocks_and_no_child_inherits_it(tmp_path: Path) -> None:
    fd = inotify.open_watch(tmp_path, inotify.IN_MODIFY)
    try:
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        os.close(fd)


def test_a_directory_that_cannot_be_watched_is_an_oserror_with_the_kernels_errno(tmp_path: Path) -> None:
    with pytest.raises(OSError) as caught:
        inotify.open_watch(tmp_path / "missing", inotify.IN_MODIFY)
    assert caught.value.errno == errno.ENOENT and "missing" in str(caught.value)


def test_a_batch_longer_than_one_read_is_read_whole_and_a_short_read_ends_it(tmp_path: Path) -> None:
    # ``changed`` stops at a read that had room for one more event (the queue was empty then): a
    # batch of long names several reads long still comes back whole from one call, and events
    # queued after it come with the next call.
    fd = inotify.open_watch(tmp_path, inotify.IN_CREATE)
    try:
        names = {f"{n:04d}".ljust(250, "x").encode() for n in range(700)}  # 272 bytes an event
        for name in names:
            (tmp_path / name.decode()).touch()
        assert inotify.changed(fd, inotify.IN_CREATE) == (names, False)
        assert inotify.changed(fd, inotify.IN_CREATE) == (set(), False)
        (tmp_path / "late").touch()
        assert inotify.changed(fd, inotify.IN_CREATE) == ({b"late"}, False)
    finally:
        os.close(fd)
