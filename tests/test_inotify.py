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
