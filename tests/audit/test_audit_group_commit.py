"""Group commit: concurrent appends share one fsync, and none is acknowledged before it; a call
that ends alone appends on its own thread, never past another appender's lock."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether.audit.log as audit_log
from tether.audit import AuditError, AuditLog, AuditRecord, GroupCommit, parse_verification_key, query, verify

pytestmark = pytest.mark.timeout(60)


class _Fsyncs:
    """Wraps ``os.fsync`` in the audit module: records each call's target, can hold one, can fail."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.threads: list[int] = []  # the thread of each call, by position
        self.hold_next = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.fail_next = False
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        self.threads.append(threading.get_ident())
        if self.fail_next and self.paths[-1].endswith(".jsonl"):
            self.fail_next = False
            raise OSError(28, "No space left on device")
        if self.hold_next.is_set():
            self.hold_next.clear()
            self.holding.set()
            assert self.release.wait(30)
        self._real(fd)

    def file_syncs(self) -> int:
        return sum(1 for p in self.paths if p.endswith(".jsonl"))

    def file_sync_threads(self) -> list[int]:
        return [t for p, t in zip(self.paths, self.threads, strict=True) if p.endswith(".jsonl")]


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Fsyncs]:
    wrapper = _Fsyncs()
    monkeypatch.setattr(audit_log.os, "fsync", wrapper)
    yield wrapper
    wrapper.release.set()


def _body(log: AuditLog, n: int) -> dict[str, Any]:
    return log.body(actor="conv-g", source="tool", tool="bash", action="run", command=f"echo {n}")


def test_queued_records_share_one_fsync_and_wait_for_it(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log = AuditLog(tmp_path)
    log.append(actor="conv-g", source="tool", tool="bash", action="run", command="echo 0")  # day file exists
    committer = GroupCommit()
    fsyncs.paths.clear()
    fsyncs.hold_next.set()
    first = committer.submit(log, _body(log, 1))
    assert fsyncs.holding.wait(30)  # the first batch is written and inside its fsync
    rest = [committer.submit(log, _body(log, n)) for n in range(2, 10)]
    assert not first.done() and not any(f.done() for f in rest)  # nothing acknowledged before its fsync
    fsyncs.release.set()
    records = [first.result(30), *(f.result(30) for f in rest)]
    assert [r.command for r in records] == [f"echo {n}" for n in range(1, 10)]
    assert [r.seq for r in records] == list(range(2, 11))
    assert fsyncs.file_syncs() == 2  # one for the first batch, one for the eight queued behind it
    assert verify(tmp_path).ok


def test_a_failed_batch_acknowledges_none_and_leaves_nothing(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log = AuditLog(tmp_path)
    log.append(actor="conv-g", source="tool", tool="bash", action="run", command="echo 0")
    size = sum(p.stat().st_size for p in (tmp_path / "audit").glob("*.jsonl"))
    committer = GroupCommit()
    fsyncs.fail_next = True
    failed = committer.submit(log, _body(log, 1))
    with pytest.raises(AuditError, match="No space left on device"):
        failed.result(30)
    assert sum(p.stat().st_size for p in (tmp_path / "audit").glob("*.jsonl")) == size
    assert committer.submit(log, _body(log, 2)).result(30).seq == 2
    assert verify(tmp_path).ok


async def test_the_async_append_returns_the_durable_record(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log = AuditLog(tmp_path, redact=lambda text: text.replace("hunter2", "[vault:PW]"))
    committer = GroupCommit()
    record = await _append(committer, log, "echo hunter2")
    assert record.command == "echo [vault:PW]"  # redacted by the caller's log before it was queued
    assert fsyncs.file_syncs() >= 1
    with pytest.raises(Exception, match="audit source"):
        await committer.append(log, actor="a", source="nope", tool="t", action="x")  # type: ignore[arg-type]


def test_a_batch_across_seal_positions_keeps_the_seals_provable(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log = AuditLog(tmp_path)
    key = log.setup_keys(every=4)
    log.append(actor="conv-g", source="tool", tool="bash", action="run", command="echo 0")
    committer = GroupCommit()
    fsyncs.hold_next.set()
    first = committer.submit(log, _body(log, 1))
    assert fsyncs.holding.wait(30)
    rest = [committer.submit(log, _body(log, n)) for n in range(2, 12)]  # one batch over two seals
    fsyncs.release.set()
    records = [first.result(30), *(f.result(30) for f in rest)]
    assert [r.command for r in records] == [f"echo {n}" for n in range(1, 12)]
    report = verify(tmp_path, key=parse_verification_key(key.text()))
    assert report.ok, report.summary()
    seals = [r for r in query(tmp_path, days=1, limit=100) if r.action == "seal"]
    assert len(seals) >= 2


async def _append(committer: GroupCommit, log: AuditLog, command: str) -> AuditRecord:
    return await committer.append(
        log, actor="conv-g", source="tool", tool="bash", action="run", command=command
    )


def _started(home: Path, fsyncs: _Fsyncs) -> tuple[AuditLog, GroupCommit]:
    """A log whose day file exists (later syncs are the records' own), and a fresh committer."""
    log = AuditLog(home)
    log.append(actor="conv-g", source="tool", tool="bash", action="run", command="echo 0")
    fsyncs.paths.clear()
    fsyncs.threads.clear()
    return log, GroupCommit()


def _day_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in (home / "audit").glob("*.jsonl"))


async def test_a_call_ending_alone_appends_on_its_own_thread(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log = AuditLog(tmp_path)
    committer = GroupCommit()
    with committer.opened():  # the call's own
        record = await _append(committer, log, "a")
    assert fsyncs.file_sync_threads() == [threading.get_ident()]  # synced before it returned, here
    assert [r.command for r in query(tmp_path, days=1, limit=10)] == ["a"]
    assert record.seq == 1
    assert verify(tmp_path).ok


async def test_with_another_call_open_the_loop_keeps_serving_through_the_sync(
    tmp_path: Path, fsyncs: _Fsyncs
) -> None:
    log, committer = _started(tmp_path, fsyncs)
    fsyncs.hold_next.set()
    with committer.opened(), committer.opened():  # this call, and another still running
        appending = asyncio.ensure_future(_append(committer, log, "echo 1"))
        # The loop runs this waiter while the record sits in its held fsync on the thread.
        assert await asyncio.to_thread(fsyncs.holding.wait, 30)
        await asyncio.sleep(0.05)
        assert not appending.done()  # not acknowledged before its fsync
        fsyncs.release.set()
        record = await appending
    assert record.command == "echo 1" and record.seq == 2
    assert threading.get_ident() not in fsyncs.file_sync_threads()
    assert verify(tmp_path).ok


async def test_while_a_record_is_queued_a_lone_call_queues_behind_it(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    # The thread is held in another home's fsync, with a record for this home queued behind it
    # (not yet holding this log's lock): a lone call must not overtake it.
    other, log = AuditLog(tmp_path / "other"), AuditLog(tmp_path / "home")
    for each in (other, log):
        each.append(actor="conv-g", source="tool", tool="bash", action="run", command="echo 0")
    committer = GroupCommit()
    fsyncs.hold_next.set()
    held = committer.submit(other, _body(other, 1))
    assert await asyncio.to_thread(fsyncs.holding.wait, 30)
    queued = committer.submit(log, _body(log, 1))
    appending = asyncio.ensure_future(_append(committer, log, "echo 2"))
    await asyncio.sleep(0.05)
    assert not appending.done()
    fsyncs.release.set()
    record = await appending
    assert held.result(30).seq == 2
    assert queued.result(30).seq == 2 and record.seq == 3  # in arrival order
    assert verify(tmp_path / "home").ok


async def test_another_appenders_lock_sends_the_record_to_the_thread(tmp_path: Path, fsyncs: _Fsyncs) -> None:
    log, committer = _started(tmp_path, fsyncs)
    # Another process's appender, as far as flock can tell: its own open file description.
    held = os.open(tmp_path / "audit" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        appending = asyncio.ensure_future(_append(committer, log, "echo 1"))
        await asyncio.sleep(0.1)  # the loop runs on: it is not stuck behind the lock
        assert not appending.done()
        assert fsyncs.file_syncs() == 0
    finally:
        os.close(held)  # releases the lock
    record = await appending
    assert record.seq == 2
    assert threading.get_ident() not in fsyncs.file_sync_threads()
    assert verify(tmp_path).ok


async def test_a_failed_alone_append_acknowledges_nothing_and_leaves_nothing(
    tmp_path: Path, fsyncs: _Fsyncs
) -> None:
    log, committer = _started(tmp_path, fsyncs)
    size = _day_bytes(tmp_path)
    fsyncs.fail_next = True
    with pytest.raises(AuditError, match="No space left on device"):
        await _append(committer, log, "echo 1")
    assert _day_bytes(tmp_path) == size
    again = await _append(committer, log, "echo 2")
    assert again.seq == 2
    assert verify(tmp_path).ok


_NO_THREAD_LEFT = """
import asyncio, json, os, sys
from pathlib import Path
from tether.audit import AuditLog, GroupCommit

# This process alone in a pids cgroup that holds nothing more: no thread can start.
Path(sys.argv[2], "cgroup.procs").write_text(str(os.getpid()))
Path(sys.argv[2], "pids.max").write_text("1")

async def go():
    committer, log = GroupCommit(), AuditLog(Path(sys.argv[1]))
    with committer.opened(), committer.opened():  # another call open: the record goes to the thread
        record = await committer.append(log, actor="a", source="tool", tool="bash", action="run")
    return record.seq

seq = asyncio.run(go())
Path(sys.argv[2], "pids.max").write_text("max")
print(json.dumps({"seq": seq}))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/sys/fs/cgroup/pids", os.W_OK),
    reason="needs a cgroup v1 pids controller of its own (root)",
)
def test_no_thread_left_still_audits_on_the_callers_thread(tmp_path: Path) -> None:
    """The user's or the cgroup's process limit reached before the audit writer thread ever
    started: ``RuntimeError: can't start new thread``, so every call that was not alone failed as
    an internal error with a traceback. The record is appended on the caller's thread instead."""
    import json
    import subprocess
    import sys

    from hang import HANG_S

    cgroup = Path("/sys/fs/cgroup/pids") / f"tether-test-{os.getpid()}-{tmp_path.name}"
    cgroup.mkdir()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _NO_THREAD_LEFT, str(tmp_path), str(cgroup)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            check=False,
        )
        assert done.returncode == 0 and done.stdout, done.stderr[-3000:]
        assert json.loads(done.stdout) == {"seq": 1}
        assert len(query(tmp_path, limit=10)) == 1 and verify(tmp_path).ok
    finally:
        cgroup.rmdir()
