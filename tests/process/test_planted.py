"""A file a hostile process may have planted: read only when it is a regular file, and bounded."""

from __future__ import annotations

import os
from pathlib import Path

from tether.process.planted import read_regular


def test_a_regular_file_is_read_up_to_one_byte_past_the_limit(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"state\n")
    large.write_bytes(b"x" * 200_000)
    assert read_regular(small, 100) == b"state\n"
    assert read_regular(large, 70_000) == b"x" * 70_001  # longer than the limit: the caller sees it
    assert read_regular(tmp_path / "absent", 100) is None


def test_a_link_a_fifo_and_a_directory_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")  # nobody writes it: a blocking open would never return
    (tmp_path / "dir").mkdir()
    for name in ("link", "fifo", "dir"):
        assert read_regular(tmp_path / name, 100) is None, name
