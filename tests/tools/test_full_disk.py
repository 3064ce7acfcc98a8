"""A state directory whose file system fills up while shells run, through the MCP client: what the
agent is told, that nothing a shell printed is dropped without a mark, and that the same shell
works again once there is room. The home is a small tmpfs of the test's own (root only)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from shell_harness import TETHER, open_shell, run, shell_client, text_of, tmux

from hang import HANG_MS, HANG_S
from tether.audit import query, verify
from tether.cli.door import stop_door

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (needs root)")

GAP = b"[tether: output is missing here: the shell's log could not be written (a full disk?)]"


@pytest.fixture
def small_home(tether_home: Path) -> Iterator[Path]:
    """``tether_home`` on a 4 MiB tmpfs; its tools process and tmux server end before the tmpfs goes."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(tether_home)], check=True)
    try:
        yield tether_home
    finally:
        stop_door(tether_home)  # returns once it has ended
        subprocess.run(["tmux", "-S", str(tether_home / "tmux.sock"), "kill-server"], capture_output=True)
        subprocess.run(["umount", "-l", str(tether_home)], check=False)


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until its file system refuses the next page."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


async def _full_since_the_last_run(home: Path) -> Path:
    """A home that a server used, then whose disk filled: SQLite removed the database's WAL index
    when the last connection closed, and a new one cannot be grown there."""
    async with shell_client(home) as client:
        assert (
            text_of(await client.call_tool("bash", {"command": "echo first", "description": "d"})) == "first"
        )
    filler = home / "filler"
    _fill(filler)
    return filler


async def _screen_shows(home: Path, shell: str, text: str) -> None:
    with anyio.fail_after(HANG_S):
        while text not in tmux(home, "capture-pane", "-p", "-t", f"={shell}:"):
            await anyio.sleep(0.05)


async def test_a_shell_whose_log_hit_a_full_disk_keeps_its_log_and_works_after(small_home: Path) -> None:
    """A command filled the disk and printed on: the pane's log writer (``cat``) ended at its first
    failed write, so the log stopped for good while the shell ran on, and after space was freed
    every ``shell_run`` on that shell waited in vain. The writer now waits for room, marks the gap
    in the log, and goes on with what the pane printed meanwhile."""
    filler = small_home / "filler"
    async with shell_client(small_home) as client:
        shell = await open_shell(client)
        assert (await run(client, shell, "echo before"))["exitCode"] == 0
        fill = f"head -c 64M /dev/zero > {filler} 2>/dev/null; seq 1 3000; echo printed-$((6*7))"
        await run(client, shell, fill, wait={"kind": "none"})
        await _screen_shows(small_home, shell, "printed-42")
        filler.unlink()
        out = await run(client, shell, "echo back-$((1+1))")
        assert (out["exitCode"], out["lines"][:1]) == (0, ["back-2"]), out
    log = (small_home / "logs" / f"{shell}.log").read_bytes()
    assert GAP in log, log[-2000:]
    after = log[log.index(GAP) :]
    # What the writer held when its write failed is lost (``printed-42`` may be in it); what the
    # pane printed once there was room follows the mark.
    assert b"back-2" in after


async def test_a_command_that_fills_the_disk_still_gets_its_result(small_home: Path) -> None:
    """The command ran, then saving its run record failed (the command had filled the disk): the
    task was an error saying "free space … and call again", so the agent saw no exit status and a
    retry would have run the command twice. The result now keeps the exit status and says what
    could not be recorded. The logs have room of their own here, so the run's end is seen."""
    logs = small_home / "logs"
    logs.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(logs)])
    filler = small_home / "filler"
    try:
        async with shell_client(small_home) as client:
            shell = await open_shell(client)
            fill = f"head -c 64M /dev/zero > {filler} 2>/dev/null; echo ran-$((6*7)); false"
            out = await run(client, shell, fill)
            assert out["ok"] and out["exitCode"] == 1, out
            (note,) = out["lines"]
            assert note.startswith(
                "[the command ran, but tether could not record it or show its output: the file system "
                f"refused tether's write to {small_home}/tether.db (database or disk is full; "
            ) and note.endswith("do not run the command again to see it]"), note
            assert " KiB free on its file system); free space there" in note, note
            filler.unlink()
            again = await run(client, shell, "echo back-$((1+1))")
            assert (again["exitCode"], again["lines"][:1]) == (0, ["back-2"]), again
    finally:
        await anyio.run_process(["tmux", "-S", str(small_home / "tmux.sock"), "kill-server"], check=False)
        await anyio.run_process(["umount", "-l", str(logs)], check=False)


async def test_a_call_that_ran_but_could_not_be_audited_says_it_ran(small_home: Path) -> None:
    """The audit log's file system went read-only during a ``bash`` call (the command did it): the
    call is refused as AUDIT_UNAVAILABLE, and the message said only "check free disk space" — the
    agent could not tell that the command had run, and would run it again. It now says so."""
    audit = small_home / "audit"
    audit.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(audit)])
    try:
        async with shell_client(small_home) as client:
            assert (
                text_of(await client.call_tool("bash", {"command": "echo first", "description": "d"}))
                == "first"
            )
            command = f"mount -o remount,ro {audit}; echo ran-$((6*7))"
            refused = await client.call_tool("bash", {"command": command, "description": "d"})
            assert refused.is_error, text_of(refused)
            message = text_of(refused)
            assert message.startswith(f"AUDIT_UNAVAILABLE: cannot append to the audit log in {audit}: "), (
                message
            )
            assert message.endswith(
                "the bash call itself ran and ended (outcome ok) but is not in the audit log, so its "
                "result is withheld; do not repeat it blindly: check what it did first"
            ), message
            await anyio.run_process(["mount", "-o", "remount,rw", str(audit)])
            done = await client.call_tool("bash", {"command": "echo again", "description": "d"})
            assert text_of(done) == "again"
        verify = await anyio.run_process([TETHER, "audit", "verify"], check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        await anyio.run_process(["umount", "-l", str(audit)], check=False)


async def test_output_whose_spill_file_the_disk_refused_says_why(small_home: Path) -> None:
    """A ``bash`` call printed more than its result holds while ``spill/`` was full: the result
    ended in ``full output: (unavailable)``, the same words as for output past ``max_spill_bytes``,
    so the agent could not tell that a full disk cost it the output nor what to free. The marker
    now names the file and the file system's reason; once there is room the next call keeps its
    output whole again. ``spill/`` is a full tmpfs of its own: the audit log has room."""
    spill = small_home / "spill"
    spill.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(spill)])
    filler = spill / "filler"
    try:
        _fill(filler)
        async with shell_client(small_home) as client:
            big = {"command": "seq 1 100000", "description": "d"}
            text = text_of(await client.call_tool("bash", big))
            marker = text.rsplit("\n", 1)[-1]
            assert re.fullmatch(
                rf"\[output truncated; full output: \(unavailable: tether could not write "
                rf"{re.escape(str(spill))}/[^ ]+\.stdout \(No space left on device\); free space there "
                r"for later calls to keep theirs\)\]",
                marker,
            ), marker
            filler.unlink()
            text = text_of(await client.call_tool("bash", big))
            kept = text.rsplit("\n", 1)[-1].removeprefix("[output truncated; full output: ").removesuffix("]")
            assert (await anyio.Path(kept).read_bytes()).endswith(b"\n99999\n100000\n"), text[-300:]
    finally:
        await anyio.run_process(["umount", "-l", str(spill)], check=False)


async def test_a_background_job_whose_spill_file_the_disk_refused_says_why(small_home: Path) -> None:
    """The same for a background job: ``job_output`` of a job whose start memory dropped while
    ``spill/`` was full said ``full stdout: (unavailable)``, as when no spill is kept at all. It now
    names the file and the file system's reason in the foreground marker's words."""
    spill = small_home / "spill"
    spill.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(spill)])
    try:
        _fill(spill / "filler")
        async with shell_client(small_home) as client:
            big = {"command": "seq 1 100000", "description": "d", "run_in_background": True}
            started = await client.call_tool("bash", big)
            assert started.structured_content is not None, text_of(started)
            job = {"jobId": started.structured_content["jobId"], "timeoutMs": HANG_MS}
            read = await client.call_tool("job_output", job)
            with anyio.fail_after(HANG_S):
                while read.structured_content is not None and read.structured_content["status"] == "running":
                    read = await client.call_tool("job_output", job)
            assert read.structured_content is not None, text_of(read)
            assert read.structured_content["spillPaths"] == {"stdout": None}, read.structured_content
            first = text_of(read).split("\n", 1)[0]
            assert re.fullmatch(
                r"\[earlier output was dropped: it exceeded the in-memory budget; full stdout: "
                rf"\(unavailable: tether could not write {re.escape(str(spill))}/[^ ]+\.stdout \(No space "
                r"left on device\); free space there for later calls to keep theirs\)\]",
                first,
            ), first
    finally:
        await anyio.run_process(["umount", "-l", str(spill)], check=False)


async def test_a_server_started_on_a_full_disk_says_the_disk_is_full_and_serves_once_it_is_not(
    small_home: Path,
) -> None:
    """``tether mcp`` started on a home whose disk had filled since the last run: SQLite cannot
    grow the database's WAL index there, and every call was refused with "the file system refused
    tether's write to …/tether.db (disk I/O error)", which reads as a failing drive. The error now
    says how much room is left; the same server serves once space is freed, and the audit log that
    the refusals were written to verifies."""
    filler = await _full_since_the_last_run(small_home)
    async with shell_client(small_home) as client:
        refused = await client.call_tool("bash", {"command": "echo hi", "description": "d"})
        assert refused.is_error, text_of(refused)
        assert text_of(refused) == (
            f"STORAGE_UNAVAILABLE: the file system refused tether's write to {small_home}/tether.db "
            "(disk I/O error; 0 KiB free on its file system); free space there, or make it writable, "
            "and call again"
        )
        filler.unlink()
        assert text_of(await client.call_tool("bash", {"command": "echo back", "description": "d"})) == "back"
    checked = await anyio.run_process([TETHER, "audit", "verify"], check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_a_call_refused_for_a_store_that_cannot_open_did_not_run_and_is_logged(
    small_home: Path, tmp_path: Path
) -> None:
    """On a home whose database cannot open (a full disk since the last run), ``bash`` ran its
    command, then failed reading the vault to mask the result: the agent got STORAGE_UNAVAILABLE
    "… and call again" for a command that had run (a retry runs it twice), and the masker failed
    again where the audit record is written, so the call was in no record at all. The vault is now
    read before anything runs: the call is refused without running, and logged without the parts
    that could not be masked."""
    ran = tmp_path / "ran"
    filler = await _full_since_the_last_run(small_home)
    async with shell_client(small_home) as client:
        command = f"echo ran >> {ran}"
        refused = await client.call_tool("bash", {"command": command, "description": "d"})
        assert refused.is_error, text_of(refused)
        assert text_of(refused).startswith("STORAGE_UNAVAILABLE: "), text_of(refused)
        assert text_of(refused).endswith("free space there, or make it writable, and call again")
        assert not await anyio.Path(ran).exists()
        filler.unlink()
        assert (
            text_of(await client.call_tool("bash", {"command": command, "description": "d"})) == "(no output)"
        )
    assert (await anyio.Path(ran).read_text()) == "ran\n"
    *_, refusal, done = query(small_home, days=1, limit=10)
    assert (refusal.tool, refusal.outcome, refusal.command) == ("bash", "error", None), refusal
    assert refusal.detail == text_of(refused).removeprefix("STORAGE_UNAVAILABLE: ")
    assert refusal.extra["code"] == "STORAGE_UNAVAILABLE"
    assert refusal.extra["withheld"] == "the vault could not be read to mask the command and the result"
    assert (done.outcome, done.command) == ("ok", command), done
    assert verify(small_home).ok


async def test_calls_refused_for_a_full_audit_disk_each_say_so_once_in_plain_words(small_home: Path) -> None:
    """``audit/`` full while calls end together: each refusal read "[Errno 28] short write to the
    audit log (…); check free disk space", the server's log printed the append's traceback for
    every call, and the calls of one batch shared one error object, which each of them extended
    with its own "the … call itself ran" — a later caller's message held the clause once per call
    before it. Now each message says the disk is full and how full, once, and the log one line."""
    audit = small_home / "audit"
    audit.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(audit)])
    try:
        _fill(audit / "filler")
        refusals: list[str] = []
        async with shell_client(small_home) as client:

            async def call(n: int) -> None:
                done = await client.call_tool("bash", {"command": f"echo {n}", "description": "d"})
                assert done.is_error, text_of(done)
                refusals.append(text_of(done))

            async with anyio.create_task_group() as group:
                for n in range(12):
                    group.start_soon(call, n)
            (audit / "filler").unlink()
            assert (
                text_of(await client.call_tool("bash", {"command": "echo back", "description": "d"}))
                == "back"
            )
        for message in refusals:
            assert message.startswith(
                f"AUDIT_UNAVAILABLE: cannot append to the audit log in {audit}: No space left on device"
            ), message
            assert (
                "; free space on its file system (0 KiB free), or make it writable; the bash call" in message
            )
            assert message.count("call itself ran") == 1, message
        log = (small_home / "logs" / "mcp.log").read_text()
        assert log.count("could not audit a bash call by conv-a: cannot append") == 12, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert verify(small_home).ok
    finally:
        await anyio.run_process(["umount", "-l", str(audit)], check=False)
