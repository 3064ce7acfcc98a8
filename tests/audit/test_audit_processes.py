"""Real writer processes: SIGKILL at random points loses no acknowledged record; two writers, one chain."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from hang import HANG_S
from tether.audit import AuditLog, verify
from tether.audit import log as log_module

WRITER = Path(__file__).with_name("audit_writer.py")


def _spawn(home: Path, tag: str, count: int, max_pad: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(home), tag, str(count), str(max_pad), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _read_ids(proc: subprocess.Popen[bytes], wanted: int) -> list[str]:
    """Block until the writer has acknowledged ``wanted`` more records (or exited)."""
    assert proc.stdout is not None
    ids: list[str] = []
    while len(ids) < wanted:
        line = proc.stdout.readline()
        if not line:
            break
        ids.append(line.decode().strip())
    return ids


def _kill(proc: subprocess.Popen[bytes]) -> list[str]:
    """SIGKILL, reap, and collect every id the writer printed before it died."""
    proc.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, stderr.decode()
    return [line for line in stdout.decode().splitlines() if line]


def _logged_ids(home: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for path in sorted((home / "audit").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            extra = json.loads(line)["extra"]
            if "id" in extra:
                ids[extra["id"]] += 1
    return ids


def test_sigkill_at_random_points_loses_no_acknowledged_record(tether_home: Path) -> None:
    rng = random.Random()
    acknowledged: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for round_no in range(6):
            # Two writers contend for the lock; one dies at a random point (perhaps holding the
            # lock, perhaps inside write()), and the survivor must go on writing past its death.
            first = _spawn(tether_home, f"r{round_no}a", 0, 48_000)
            second = _spawn(tether_home, f"r{round_no}b", 0, 48_000)
            procs += [first, second]
            acknowledged += _read_ids(first, rng.randint(1, 40))
            acknowledged += _kill(first)
            after = _read_ids(second, 5)
            assert len(after) == 5, "the surviving writer stalled after the other was killed"
            acknowledged += after
            acknowledged += _read_ids(second, rng.randint(0, 20))
            acknowledged += _kill(second)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    # Whatever the last kill left behind is settled by the next append; then the chain holds.
    AuditLog(tether_home).append(actor="test", source="cli", tool="audit-test", action="after-crashes")
    report = verify(tether_home)
    assert report.ok, report.summary()
    logged = _logged_ids(tether_home)
    missing = [record_id for record_id in acknowledged if logged[record_id] != 1]
    assert not missing, f"acknowledged records lost or duplicated: {missing[:10]}"
    assert len(acknowledged) >= 6 * (1 + 5)


def test_two_processes_writing_5000_records_each_keep_one_chain(tether_home: Path) -> None:
    writers = [_spawn(tether_home, tag, 5000, 0) for tag in ("alpha", "beta")]
    for proc in writers:
        _stdout, stderr = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, stderr.decode()
    report = verify(tether_home)
    assert report.ok, report.summary()
    assert report.records == 10_000
    actors = Counter(
        json.loads(line)["actor"]
        for path in (tether_home / "audit").glob("*.jsonl")
        for line in path.read_bytes().splitlines()
    )
    assert actors == {"alpha": 5000, "beta": 5000}


def test_a_writer_killed_inside_a_record_write_is_repaired_by_the_next_writer(tether_home: Path) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        torn_writer = _spawn(tether_home, "torn", 0, 2000, "7")
        procs.append(torn_writer)
        acknowledged = _read_ids(torn_writer, 7)
        assert _read_ids(torn_writer, 1) == ["TORN"]  # half a line written, lock held
        survivor = _spawn(tether_home, "survivor", 0, 0)  # blocks on the lock until the kill
        procs.append(survivor)
        acknowledged += _kill(torn_writer)
        acknowledged += _read_ids(survivor, 3)
        acknowledged += _kill(survivor)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert "TORN" not in acknowledged and len(acknowledged) == 10
    records = [
        json.loads(line)
        for path in sorted((tether_home / "audit").glob("*.jsonl"))
        for line in path.read_bytes().splitlines()
    ]
    assert records[7]["action"] == "repair" and records[7]["source"] == "host"
    assert records[7]["extra"]["bytes"] > 0
    assert [r["extra"].get("id") for r in records[8:11]] == ["survivor-0", "survivor-1", "survivor-2"]
    report = verify(tether_home)
    assert report.ok, report.summary()
    logged = _logged_ids(tether_home)
    assert all(logged[record_id] == 1 for record_id in acknowledged)
    assert "torn-7" not in logged  # the unacknowledged record is the one that was lost


def test_verify_while_a_writer_appends_never_reports_a_false_break(tether_home: Path) -> None:
    writer = _spawn(tether_home, "busy", 0, 30_000)
    try:
        _read_ids(writer, 1)
        counts = []
        for _ in range(25):
            report = verify(tether_home)
            assert report.ok, report.summary()
            counts.append(report.records)
            _read_ids(writer, 1)  # the writer keeps going between and during verifications
        assert counts == sorted(counts) and counts[-1] > counts[0]
    finally:
        _kill(writer)


def test_a_record_another_process_appended_is_chained_onto_not_skipped(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process knows the head its own last append left and reuses it while the file is exactly
    # as it left it; a record appended by another process in between must be seen and chained to.
    log = AuditLog(tether_home)
    reads: list[int] = []
    real_iter = log_module.iter_lines_reverse

    def counting(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
        reads.append(end)
        return real_iter(fd, end)

    monkeypatch.setattr(log_module, "iter_lines_reverse", counting)
    first = log.append(actor="here", source="tool", tool="t", action="a")
    reads.clear()
    second = log.append(actor="here", source="tool", tool="t", action="b")
    assert reads == [] and second.prev == first.hash  # the known head, the file not read again
    proc = _spawn(tether_home, "there", 1, 0)
    _stdout, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, stderr.decode()
    third = log.append(actor="here", source="tool", tool="t", action="c")
    assert reads, "the file changed under another writer but its end was not read"
    lines = [
        json.loads(line)
        for path in sorted((tether_home / "audit").glob("*.jsonl"))
        for line in path.read_bytes().splitlines()
    ]
    assert [r["actor"] for r in lines] == ["here", "here", "there", "here"]
    assert third.seq == 4 and third.prev == lines[2]["hash"]
    report = verify(tether_home)
    assert report.ok and report.records == 4, report.summary()
