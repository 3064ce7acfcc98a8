"""Where a command's output cannot go: a reader that left (``| head``) ends it quietly with 141, as
SIGPIPE would; a full disk under ``> file`` is one line on stderr with exit status 2. Never a
traceback, and a running command is stopped rather than left writing into nothing."""

from __future__ import annotations

import json
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


def test_help_that_cannot_be_written_is_no_success(tether_home: Path) -> None:
    # argparse swallows an OSError from writing its help: `tether --help > /dev/full` ended 0.
    for args in (["--help"], ["shell", "list", "--help"], ["mcp", "--help"]):
        assert (done := _into_a_closed_pipe(*args)).returncode == 141 and done.stderr == "", done
        assert (done := _onto_a_full_disk(*args)).returncode == 2 and done.stderr == FULL, done


def test_an_output_encoding_that_is_not_utf8_gets_escapes_not_a_traceback(tether_home: Path) -> None:
    # A latin-1 locale, or PYTHONIOENCODING=ascii: the help's dash and the ellipsis `audit verify`
    # ends its head hash with ended in a UnicodeEncodeError traceback.
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args, shown in ((["--help"], "agents \\u2014 one-shot"), (["audit", "verify"], "\\u2026")):
        done = subprocess.run(
            [sys.executable, "-m", "tether", *args], capture_output=True, env=env, timeout=HANG_S, check=False
        )
        assert (done.returncode, done.stderr) == (0, b""), done
        assert shown.encode() in done.stdout, done.stdout


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


def _with_closed(fds: tuple[int, ...], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``tether ARGS`` started with ``fds`` closed, as a parent that closed them leaves it."""

    def close() -> None:
        for fd in fds:
            os.close(fd)

    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        input=stdin if 0 not in fds else None,
        stdout=None if 1 in fds else subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=close,
        timeout=HANG_S,
        check=False,
    )


def test_a_closed_stdout_or_stdin_is_no_traceback(tether_home: Path) -> None:
    # Python leaves sys.stdout None on a closed descriptor 1: every command ended in an
    # AttributeError traceback (exit 1).
    for args in (["--version"], ["shell", "list"], ["exec", "--", "echo", "hi"]):
        done = _with_closed((1,), *args)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done
    done = _with_closed((0,), "exec", "--", "echo hi")
    assert done.returncode == 0 and done.stdout == b"hi\n", done


def test_mcp_with_a_closed_stdout_never_writes_into_its_log(tether_home: Path) -> None:
    # The first file tether opened took descriptor 1: the MCP answers went into logs/mcp.log.
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    done = _with_closed((1,), "mcp", stdin=json.dumps(init).encode() + b"\n")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done
    log = (tether_home / "logs" / "mcp.log").read_text()
    assert "stdio client closed the connection" in log and '"jsonrpc"' not in log
