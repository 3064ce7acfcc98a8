"""A live shell's log, or a snapshot's file, removed or replaced under a running server
(``tether mcp``, the SDK client).

tether reads a shell's output only from ``$TETHER_HOME/logs/<shell>.log``. Someone (a cleanup
script, a person) removed it or put something else there while the shell ran: a FIFO hung the
whole server (its open waited for a writer on the event loop), a directory made every
``shell_run`` and the close ``INTERNAL`` with an ``IsADirectoryError`` traceback (the shell could
not even be closed), and a removed log or a symbolic link in its place made every run wait out its
timeout and then blame "bash runs in front". Each is now ``STORAGE_UNAVAILABLE`` naming the log and
the fix, the close still closes, and other calls are served. The same for a snapshot's scrollback
file (a FIFO there hung ``shell_open from``) and a file in place of ``snapshots/`` (every close was
``INTERNAL``).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from shell_harness import call, open_shell, run, shell_client

from hang import HANG_S


def _replace(log: Path, kind: str, tmp_path: Path) -> None:
    log.unlink()
    if kind == "directory":
        log.mkdir()
    elif kind == "fifo":
        os.mkfifo(log, 0o600)
    elif kind == "symlink":
        other = tmp_path / "other.txt"
        other.write_text("someone else's file\n", encoding="utf-8")
        log.symlink_to(other)


@pytest.mark.parametrize("kind", ["removed", "directory", "fifo", "symlink"])
async def test_a_log_removed_or_replaced_is_one_clear_error_and_the_shell_still_closes(
    tether_home: Path, tmp_path: Path, kind: str
) -> None:
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        assert (await run(c, shell, "echo before"))["exitCode"] == 0
        log = tether_home / "logs" / f"{shell}.log"
        _replace(log, kind, tmp_path)
        with anyio.fail_after(HANG_S):  # a FIFO hung the server here
            ran = await run(c, shell, "echo after", wait={"kind": "exit", "timeoutMs": 60_000})
            _, read = await call(
                c, "shell_read", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read"}}]}
            )
        for task in (ran, read["tasks"][0]):
            assert task["ok"] is False and task["errorCode"] == "STORAGE_UNAVAILABLE", task
            if kind == "removed":
                assert (
                    f"the output log of shell {shell}, {log}, was removed while the shell ran"
                    in task["error"]
                )
            else:
                assert f"{log}, a shell's output log, is not a regular file" in task["error"], task
            assert "close it" in task["error"] or "close the shell" in task["error"]
        one_shot, _ = await call(c, "bash", {"command": "echo served", "description": "still serving"})
        assert one_shot.strip() == "served"
        _, closed = await call(
            c, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert closed["tasks"][0]["ok"] is True, closed
        _, listed = await call(c, "shell_state", {"scope": "*"})
        assert shell not in {s["shell"] for s in listed["shells"]}
        assert (await open_shell(c)) != shell  # and the next shell is served


async def test_a_snapshot_file_replaced_is_one_clear_error_at_shell_open_from(tether_home: Path) -> None:
    # A FIFO in place of a snapshot's scrollback hung the whole server at `shell_open from`.
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        await call(
            c, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        (scrollback,) = (tether_home / "snapshots" / shell).glob("*.txt")
        scrollback.unlink()
        os.mkfifo(scrollback, 0o600)
        with anyio.fail_after(HANG_S):
            _, data = await call(c, "shell_open", {"tasks": [{"action": {"kind": "open", "from": shell}}]})
        (task,) = data["tasks"]
        assert task["errorCode"] == "STORAGE_UNAVAILABLE", task
        assert f"{scrollback}, the scrollback of snapshot" in task["error"]
        scrollback.unlink()
        assert (await open_shell(c, **{"from": shell})) != shell  # removed: revived without it


async def test_a_file_in_place_of_the_snapshots_directory_keeps_the_shell_open(tether_home: Path) -> None:
    # It made every close INTERNAL (FileExistsError). A close needs its snapshot first: it is refused,
    # naming the file, and the shell stays open and listed until the file is removed.
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        (tether_home / "snapshots").write_text("not a directory", encoding="utf-8")
        close = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        _, data = await call(c, "shell_manage", close)
        (task,) = data["tasks"]
        assert task["errorCode"] == "STORAGE_UNAVAILABLE", task
        assert f"{tether_home / 'snapshots'} is not a directory" in task["error"]
        _, listed = await call(c, "shell_state", {})
        assert [s["shell"] for s in listed["shells"]] == [shell]
        assert (await run(c, shell, "echo still-here"))["lines"][:1] == ["still-here"]
        (tether_home / "snapshots").unlink()
        _, data = await call(c, "shell_manage", close)
        assert data["tasks"][0]["ok"] is True, data
