"""AuditLog.append: record shape, one line per record, redaction, validation, threads, durability."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tether.audit import GENESIS_HASH, AuditError, AuditLog, query, verify
from tether.audit import log as log_module
from tether.audit.record import canonical_json, check_line, day_name, iso_time, record_hash
from tether.errors import UsageError

NOON = 1_796_040_000.0  # 2026-11-30T12:00:00Z


def _lines(home: Path) -> list[bytes]:
    out: list[bytes] = []
    for path in sorted((home / "audit").glob("*.jsonl")):
        out.extend(path.read_bytes().splitlines(keepends=True))
    return out


def test_record_fields_and_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=lambda: NOON + 0.1234)
    first = log.append(
        actor="conv-1",
        source="tool",
        tool="shell_run",
        action="run",
        targets=["dsh-ab12cd"],
        command="make -j8",
        outcome="blocked",
        detail="rule rm-root",
        reason="cleanup",
        flags=["bypass-guard"],
        extra={"rule": "rm-root", "n": 3},
    )
    assert first.seq == 1 and first.prev == GENESIS_HASH
    assert first.time == "2026-11-30T12:00:00.123Z" and first.ts == 1_796_040_000_123
    assert (first.actor, first.source, first.tool, first.action) == ("conv-1", "tool", "shell_run", "run")
    assert first.targets == ("dsh-ab12cd",) and first.flags == ("bypass-guard",)
    assert (first.outcome, first.detail, first.reason) == ("blocked", "rule rm-root", "cleanup")
    second = log.append(actor="panel", source="panel", tool="shell", action="lock")
    assert second.seq == 2 and second.prev == first.hash
    assert second.command is None and second.reason is None and second.targets == ()
    lone = log.append(actor="cli", source="cli", tool="t", action="a", targets="dsh-ab12cd", flags="x")
    assert lone.targets == ("dsh-ab12cd",) and lone.flags == ("x",)

    path = tmp_path / "audit" / "2026-11-30.jsonl"
    stored = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert stored == [first.to_dict(), second.to_dict(), lone.to_dict()]
    assert stored[0]["hash"] == record_hash(stored[0])
    assert path.read_bytes().splitlines()[0] == canonical_json(stored[0]).encode()
    assert verify(tmp_path).ok


def test_each_line_is_the_canonical_record_with_its_hash_wherever_outcome_text_hides(tmp_path: Path) -> None:
    # The line is built by putting the hash into the encoded record before its own "outcome" key;
    # the same text elsewhere (a nested object's key, inside strings) must not be taken for it.
    trap = ',"outcome":"ok","hash":"' + "0" * 64 + '"'
    log = AuditLog(tmp_path, redact=lambda text: text, clock=lambda: NOON)
    written = [
        log.append(
            actor=trap,
            source="tool",
            tool=trap,
            action=trap,
            targets=[trap, "dsh-ab12cd"],
            command=trap,
            outcome="error",
            detail=trap,
            reason=trap,
            flags=[trap],
            extra={"a": 1, "outcome": {"outcome": trap, "hash": 2}, "zz": [{"outcome": None}], trap: trap},
        ),
        log.append(actor="a", source="cli", tool="t", action="a", extra={"outcome": "x"}),
        log.append(actor="a", source="cli", tool="t", action="a"),
    ]
    lines = (tmp_path / "audit" / "2026-11-30.jsonl").read_bytes().splitlines()
    assert len(lines) == 3
    for line, record in zip(lines, written, strict=True):
        stored = record.to_dict()
        assert line == canonical_json(stored).encode("ascii")
        assert record.hash == record_hash(stored) and check_line(line) == stored
    assert written[0].extra["outcome"] == {"outcome": trap, "hash": 2} and written[0].outcome == "error"
    assert verify(tmp_path).ok


def _iso_by_datetime(ts_ms: int) -> str:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def test_record_times_and_day_files_read_as_the_utc_calendar_says() -> None:
    import random

    day = 86_400_000
    edges = [0, 1, 999, 1000, day - 1, day, 951_782_400_000 - 1, 951_782_400_000]  # 2000-02-29
    edges += [4_107_542_400_000 - 1, 4_107_542_400_000]  # 2100-03-01: no 29 February that year
    edges += [1_796_083_199_999, 1_796_083_200_000, 2_147_483_647_999, 2_147_483_648_000]
    edges += [253_402_300_799_999, 253_402_300_799_998, -1, -day]  # the last instant, before 1970
    rng = random.Random(7)
    stamps = edges + [rng.randrange(0, 253_402_300_800_000) for _ in range(20_000)]
    for ts in stamps:
        expected = _iso_by_datetime(ts)
        assert iso_time(ts) == expected, ts
        assert day_name(ts) == expected[:10] + ".jsonl", ts
    assert iso_time(1_796_040_000_123) == "2026-11-30T12:00:00.123Z"


def test_hostile_command_stays_inside_its_record(tmp_path: Path) -> None:
    hostile = 'echo "a"\n{"fake":1}\r\n\x1b[2J\u2028\u2029é漢\udcff\x00\n'
    log = AuditLog(tmp_path)
    log.append(actor="cli", source="cli", tool="t", action="a", command="before")
    log.append(actor="cli", source="cli", tool="t", action="a", command=hostile, reason='{"fake":1}\n')
    log.append(actor="cli", source="cli", tool="t", action="a", command="after")
    lines = _lines(tmp_path)
    assert len(lines) == 3 and all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert all(line.isascii() for line in lines)
    assert b'{"fake":1}' not in b"".join(lines)  # only ever present escaped, inside a string
    records = query(tmp_path, limit=10)
    assert [r.command for r in records] == ["before", hostile, "after"]
    assert records[1].reason == '{"fake":1}\n'
    assert verify(tmp_path).ok


def test_redaction_reaches_every_text_field(tmp_path: Path) -> None:
    secret = "hunter2-canary"
    log = AuditLog(tmp_path, redact=lambda text: text.replace(secret, "****"))
    record = log.append(
        actor=f"conv-{secret}",
        source="tool",
        tool="shell_run",
        action="run",
        targets=[f"dsh-{secret}"],
        command=f"curl -u admin:{secret} https://x",
        detail=f"failed: {secret}",
        reason=f"because {secret}",
        flags=[f"flag-{secret}"],
        extra={"nested": {"list": [f"x{secret}", 1]}, "top": secret},
    )
    raw = b"".join(_lines(tmp_path))
    assert secret.encode() not in raw
    assert record.command == "curl -u admin:**** https://x"
    assert record.extra == {"nested": {"list": ["x****", 1]}, "top": "****"}
    assert verify(tmp_path).ok


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    with pytest.raises(UsageError, match=r"source 'robot'.*tool, panel, host, cli"):
        log.append(actor="a", source="robot", tool="t", action="a")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="outcome 'meh'"):
        log.append(actor="a", source="tool", tool="t", action="a", outcome="meh")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="actor must be a non-empty"):
        log.append(actor=" ", source="tool", tool="t", action="a")
    with pytest.raises(UsageError, match="extra holds a set"):
        log.append(actor="a", source="tool", tool="t", action="a", extra={"s": {1}})
    with pytest.raises(UsageError, match="JSON cannot represent"):
        log.append(actor="a", source="tool", tool="t", action="a", extra={"x": float("nan")})
    assert verify(tmp_path).records == 0


def test_oversized_fields_are_bounded_not_refused(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    long_command = "y" * (log_module.MAX_COMMAND_CHARS + 10)
    record = log.append(
        actor="a", source="tool", tool="t", action="a", command=long_command, extra={"blob": "z" * 5_000}
    )
    assert record.command is not None and record.command.endswith("…[10 more characters not logged]")
    assert "command-truncated" in record.flags
    assert str(record.extra["blob"]).endswith("…[904 more characters not logged]")
    many = {f"k{i}": "z" * 4_000 for i in range(5)}
    bounded = log.append(actor="a", source="tool", tool="t", action="a", extra=many)
    assert list(bounded.extra) == ["omitted"] and "over the 16384-byte limit" in str(bounded.extra["omitted"])
    assert verify(tmp_path).ok


def test_threads_share_one_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    errors: list[BaseException] = []

    def work(tag: str) -> None:
        try:
            for i in range(150):
                log.append(actor=tag, source="tool", tool="t", action="a", extra={"i": i})
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"thread-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    report = verify(tmp_path)
    assert report.ok and report.records == 600
    # Two AuditLog objects in one process exclude each other through the flock as well.
    other = AuditLog(tmp_path)
    assert other.append(actor="x", source="cli", tool="t", action="a").seq == 601


def test_append_syncs_the_file_and_a_new_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    log = AuditLog(tmp_path, clock=lambda: NOON)
    log.append(actor="a", source="tool", tool="t", action="a")
    day_file = str(tmp_path / "audit" / "2026-11-30.jsonl")
    assert synced == [str(tmp_path), day_file, str(tmp_path / "audit")]
    synced.clear()
    log.append(actor="a", source="tool", tool="t", action="a")
    assert synced == [day_file]


def test_short_write_is_an_error_and_leaves_no_partial_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = AuditLog(tmp_path)
    log.append(actor="a", source="tool", tool="t", action="a")
    real_write = os.write

    def half_write(fd: int, data: bytes) -> int:
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", half_write)
    with pytest.raises(AuditError, match=r"cannot append to the audit log.*short write"):
        log.append(actor="a", source="tool", tool="t", action="a", command="lost")
    monkeypatch.undo()
    assert all(line.endswith(b"\n") for line in _lines(tmp_path))
    assert verify(tmp_path).ok
    assert log.append(actor="a", source="tool", tool="t", action="a").seq == 2


def test_unwritable_home_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(AuditError, match="cannot append to the audit log") as info:
        AuditLog(blocker).append(actor="a", source="tool", tool="t", action="a")
    assert info.value.code == "AUDIT_UNAVAILABLE"
