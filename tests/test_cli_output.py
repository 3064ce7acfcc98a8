"""Where a command's output cannot go: a reader that left (``| head``) ends it quietly with 141, as
SIGPIPE would; a full disk under ``> file`` is one line on stderr with exit status 2. Never a
traceback, and a running command is stopped rather than left writing into nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hang import HANG_S
from proc_probe import alive_with, unique_sleep_arg

FULL = (
    "tether: STORAGE_UNAVAILABLE: its output could not be written (No space left on device); "
    "free space there, or make it writable\n"
)


def _tether(*args: str, stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=HANG_S,
        check=False,
    )


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte: every write fails
    try:
        return _tether(*args, stdout=write)
    finally:
        os.close(write)


def _onto_a_full_disk(*args: str) -> subprocess.CompletedProcess[str]:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        return _tether(*args, stdout=fd)
    finally:
        os.close(fd)


def test_the_commands_of_the_tools_process_and_version(tether_home: Path) -> None:
    for args in (["--version"], ["audit", "verify"], ["shell", "list"]):
        assert (done := _into_a_closed_pipe(*args)).returncode == 141 and done.stderr == "", done
        assert (done := _onto_a_full_disk(*args)).returncode == 2 and done.stderr == FULL, done


def test_exec_stops_its_command_when_the_output_cannot_be_written(tether_home: Path) -> None:
    token = unique_sleep_arg()
    done = _onto_a_full_disk("exec", "--", f"while :; do echo y; done & sleep {token}")
    assert done.returncode == 2, done
    assert done.stderr == (
        "tether: STORAGE_UNAVAILABLE: the command's output could not be written (No space left on "
        "device), so it was stopped; free space where its output goes, or send it elsewhere\n"
    )
    assert alive_with(token) == []  # the command and what it left in the background
    done = _into_a_closed_pipe("exec", "--", "echo y")
    assert (done.returncode, done.stderr) == (141, "")
