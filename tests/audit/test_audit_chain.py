"""The chain across days and across crashes: rollover, clock steps, torn tails and their repair."""

from __future__ import annotations

import json
from pathlib import Path

from tether.audit import AuditLog, verify

DAY1_LATE = 1_795_996_799.9  # 2026-11-29T23:59:59.900Z
DAY2_EARLY = 1_795_996_800.1  # 2026-11-30T00:00:00.100Z
DAY5 = DAY2_EARLY + 3 * 86_400  # 2026-12-03


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _append(log: AuditLog, name: str = "x") -> str:
    return log.append(actor="a", source="tool", tool="t", action=name).hash


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_day_rollover_continues_the_chain(tmp_path: Path) -> None:
    clock = Clock(DAY1_LATE)
    log = AuditLog(tmp_path, clock=clock)
    _append(log)
    last_of_day1 = _append(log)
    clock.now = DAY2_EARLY
    first_of_day2 = log.append(actor="a", source="tool", tool="t", action="x")
    assert first_of_day2.prev == last_of_day1 and first_of_day2.seq == 3
    clock.now = DAY5  # days without records in between
    after_gap = log.append(actor="a", source="tool", tool="t", action="x")
    assert after_gap.prev == first_of_day2.hash
    names = sorted(p.name for p in (tmp_path / "audit").glob("*.jsonl"))
    assert names == ["2026-11-29.jsonl", "2026-11-30.jsonl", "2026-12-03.jsonl"]
    report = verify(tmp_path)
    assert report.ok and report.records == 4 and report.files == 3 and report.head == after_gap.hash


def test_a_clock_stepping_back_never_reorders_the_chain(tmp_path: Path) -> None:
    clock = Clock(DAY2_EARLY)
    log = AuditLog(tmp_path, clock=clock)
    _append(log)
    clock.now = DAY1_LATE
    back = log.append(actor="a", source="tool", tool="t", action="x")
    assert back.time.startswith("2026-11-29")
    assert not (tmp_path / "audit" / "2026-11-29.jsonl").exists()  # filed after the newer record
    assert len(_records(tmp_path / "audit" / "2026-11-30.jsonl")) == 2
    assert verify(tmp_path).ok


def test_an_empty_newer_file_is_skipped_when_finding_the_head(tmp_path: Path) -> None:
    clock = Clock(DAY1_LATE)
    log = AuditLog(tmp_path, clock=clock)
    head = _append(log)
    (tmp_path / "audit" / "2026-11-30.jsonl").touch()  # a writer died right after creating it
    clock.now = DAY5
    assert log.append(actor="a", source="tool", tool="t", action="x").prev == head
    assert verify(tmp_path).ok


def test_only_day_files_are_the_chains_files(tmp_path: Path) -> None:
    # A name shaped like a day file that is no date, and other files, are never the newest file
    # (appends check each name once and remember the answer: the verdict must be the same).
    clock = Clock(DAY1_LATE)
    log = AuditLog(tmp_path, clock=clock)
    head = _append(log)
    for name in ("2099-02-30.jsonl", "2099-13-01.jsonl", "2099-1-01.jsonl", "zz.jsonl", "notes.txt"):
        (tmp_path / "audit" / name).write_text("{}\n")
    for _ in range(2):  # the second time from the remembered verdicts
        record = log.append(actor="a", source="tool", tool="t", action="x")
        assert record.prev == head
        head = record.hash
    assert len(_records(tmp_path / "audit" / "2026-11-29.jsonl")) == 3
    assert verify(tmp_path).ok


def test_torn_garbage_tail_is_reported_then_discarded_and_logged(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=Clock(DAY2_EARLY))
    for _ in range(3):
        head = _append(log)
    path = tmp_path / "audit" / "2026-11-30.jsonl"
    size_before = path.stat().st_size
    torn = b'{"action":"run","actor":"conv-9","comm'  # a writer killed inside write()
    with path.open("ab") as handle:
        handle.write(torn)
    report = verify(tmp_path)
    assert not report.ok and report.records == 3
    assert report.first_break is not None and report.first_break.line == 4
    assert f"incomplete line ({len(torn)} bytes without a newline)" in report.first_break.problem

    record = log.append(actor="a", source="tool", tool="t", action="after")
    stored = _records(path)
    assert len(stored) == 5
    repair = stored[3]
    assert (repair["source"], repair["action"], repair["prev"]) == ("host", "repair", head)
    assert repair["extra"] == {"file": "2026-11-30.jsonl", "offset": size_before, "bytes": len(torn)}
    assert record.prev == repair["hash"] and record.seq == 5
    assert verify(tmp_path).ok


def test_torn_tail_that_is_a_whole_record_is_completed_not_discarded(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=Clock(DAY2_EARLY))
    _append(log)
    unacknowledged = _append(log)
    path = tmp_path / "audit" / "2026-11-30.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-1])  # the writer died before the last byte: its newline
    assert not verify(tmp_path).ok
    record = log.append(actor="a", source="tool", tool="t", action="x")
    assert record.prev == unacknowledged and record.seq == 3
    assert [r["action"] for r in _records(path)] == ["x", "x", "x"]  # no repair record needed
    assert verify(tmp_path).ok


def test_torn_tail_of_the_previous_day_is_settled_by_the_next_days_writer(tmp_path: Path) -> None:
    clock = Clock(DAY1_LATE)
    log = AuditLog(tmp_path, clock=clock)
    head = _append(log)
    day1 = tmp_path / "audit" / "2026-11-29.jsonl"
    with day1.open("ab") as handle:
        handle.write(b'{"act')
    clock.now = DAY2_EARLY
    record = log.append(actor="a", source="tool", tool="t", action="x")
    assert day1.read_bytes().endswith(b"}\n") and len(_records(day1)) == 1
    day2 = _records(tmp_path / "audit" / "2026-11-30.jsonl")
    assert day2[0]["action"] == "repair" and day2[0]["prev"] == head
    assert record.prev == day2[0]["hash"]
    report = verify(tmp_path)
    assert report.ok and report.records == 3


def test_a_corrupt_complete_line_is_kept_as_evidence(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=Clock(DAY2_EARLY))
    good = _append(log)
    path = tmp_path / "audit" / "2026-11-30.jsonl"
    with path.open("ab") as handle:
        handle.write(b"this is not a record\n")
    record = log.append(actor="a", source="tool", tool="t", action="x")
    assert record.prev == good  # chained past the damage, which stays in place
    assert b"this is not a record\n" in path.read_bytes()
    report = verify(tmp_path)
    assert not report.ok and report.first_break is not None
    assert report.first_break.line == 2 and "not valid JSON" in report.first_break.problem
