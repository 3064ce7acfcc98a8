"""query / export: filters, the rolling window, newest last, and reading only as far as needed."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest

from tether.audit import AuditError, AuditLog, export, query
from tether.audit import lines as lines_module
from tether.errors import UsageError

DAY = 86_400.0
NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _populate(home: Path) -> None:
    """Ten days of records, one an hour from 10 days ago up to now, cycling actors and sources."""
    clock = Clock(NOW - 10 * DAY)
    log = AuditLog(home, clock=clock)
    actors = [("conv-a", "tool"), ("conv-b", "tool"), ("panel", "panel"), ("cli", "cli")]
    hour = 0
    while clock.now <= NOW:
        actor, source = actors[hour % 4]
        log.append(
            actor=actor,
            source=source,  # type: ignore[arg-type]
            tool="shell_run",
            action="run",
            targets=[f"dsh-{hour % 3:06d}"],
            command=f"echo {hour}",
        )
        clock.now += 3600
        hour += 1


@pytest.fixture
def home(tmp_path: Path) -> Path:
    _populate(tmp_path)
    return tmp_path


def test_newest_last_within_limit(home: Path) -> None:
    records = query(home, limit=5, clock=lambda: NOW)
    assert [r.command for r in records] == [f"echo {h}" for h in range(236, 241)]
    assert [r.seq for r in records] == sorted(r.seq for r in records)


def test_rolling_window_of_days(home: Path) -> None:
    one_day = query(home, days=1, limit=1000, clock=lambda: NOW)
    assert len(one_day) == 25  # the last 24 hours, both ends included
    assert min(r.ts for r in one_day) == int((NOW - DAY) * 1000)
    three_days = query(home, days=3, limit=1000, clock=lambda: NOW)
    assert len(three_days) == 73
    assert len(query(home, days=3650, limit=10_000, clock=lambda: NOW)) == 241


def test_filters_by_actor_source_and_shell(home: Path) -> None:
    records = query(home, actor="panel", days=2, limit=1000, clock=lambda: NOW)
    assert records and {r.actor for r in records} == {"panel"}
    assert {r.source for r in query(home, source="cli", days=2, limit=1000, clock=lambda: NOW)} == {"cli"}
    shell = query(home, shell="dsh-000001", days=2, limit=1000, clock=lambda: NOW)
    assert shell and all(r.targets == ("dsh-000001",) for r in shell)
    both = query(home, actor="conv-a", shell="dsh-000000", days=10, limit=1000, clock=lambda: NOW)
    assert both and all(r.actor == "conv-a" and "dsh-000000" in r.targets for r in both)
    assert query(home, actor="nobody", limit=5, clock=lambda: NOW) == []


def test_one_calendar_day(home: Path) -> None:
    records = query(home, day="2026-11-25", limit=1000)
    assert len(records) == 24 and all(r.time.startswith("2026-11-25") for r in records)
    assert query(home, day=date(2026, 11, 25), limit=1000) == records
    assert query(home, day="2019-01-01", limit=5) == []


def test_export_returns_the_stored_lines(home: Path) -> None:
    lines = export(home, limit=3, clock=lambda: NOW)
    stored = (home / "audit" / "2026-11-30.jsonl").read_text().splitlines()
    assert lines == stored[-3:]


def test_invalid_arguments_name_the_allowed_values(home: Path) -> None:
    with pytest.raises(UsageError, match="days must be a whole number from 1 to 3650"):
        query(home, days=0)
    with pytest.raises(UsageError, match="days must be a whole number from 1 to 3650"):
        query(home, days=3651)
    with pytest.raises(UsageError, match="limit must be a whole number of at least 1"):
        export(home, limit=0)
    with pytest.raises(UsageError, match=r"source 'robot'.*tool, panel, host, cli"):
        query(home, source="robot")
    with pytest.raises(UsageError, match="write it as YYYY-MM-DD"):
        query(home, day="yesterday")


def test_a_small_query_reads_only_the_end_of_a_large_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(NOW)
    log = AuditLog(tmp_path, clock=clock)
    for index in range(1500):
        log.append(actor="a", source="tool", tool="t", action="a", command=f"{index:04d} " + "x" * 700)
    (tmp_path / "audit" / "2026-11-29.jsonl").mkdir()  # an older "file" that must not be opened
    size = (tmp_path / "audit" / "2026-11-30.jsonl").stat().st_size
    read: list[int] = []
    real_pread = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        read.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting)
    records = query(tmp_path, days=2, limit=5, clock=clock)
    assert [r.command[:4] for r in records if r.command] == ["1495", "1496", "1497", "1498", "1499"]
    assert size > 1_000_000 and sum(read) <= 2 * lines_module.BLOCK
    monkeypatch.undo()
    with pytest.raises(AuditError, match=r"cannot read the audit file .*2026-11-29.jsonl.*Is a directory"):
        query(tmp_path, days=2, limit=5000, clock=clock)  # a query that must go further does open it
