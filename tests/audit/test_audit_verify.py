"""verify: every single-byte change is caught at the line it is in; structural damage is named."""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import random
from pathlib import Path

import pytest

from tether.audit import BREAK_CODES, AuditLog, verify
from tether.audit.record import canonical_json, record_hash

# ``tether.audit.verify`` the attribute is the function; the module is reached through importlib.
verification = importlib.import_module("tether.audit.verify")

DAY1 = 1_795_996_799.0  # 2026-11-29T23:59:59Z


def _populate(home: Path) -> list[Path]:
    now = [DAY1]
    log = AuditLog(home, clock=lambda: now[0])
    commands = ['echo "é\\n"\n{"fake":1}', "ls -la", "printf '\\x1b[2J'", "漢字 \u2028", "make -j8"]
    for index, command in enumerate(commands * 2):
        if index == 5:
            now[0] = DAY1 + 2.0  # the second half lands in the next day's file
        log.append(
            actor=f"conv-{index}",
            source="tool",
            tool="shell_run",
            action="run",
            targets=["dsh-ab12cd"],
            command=command,
            reason="r" if index % 2 else None,
            extra={"n": index, "f": 1.5},
        )
    return sorted((home / "audit").glob("*.jsonl"))


def _line_of(data: bytes, position: int) -> int:
    """1-based line number of byte ``position`` (a newline belongs to the line it ends)."""
    return data.count(b"\n", 0, position) + 1


def test_an_intact_log_verifies(tmp_path: Path) -> None:
    files = _populate(tmp_path)
    report = verify(tmp_path)
    assert report.ok and report.records == 10 and report.files == 2 and report.first_break is None
    assert report.head == json.loads(files[-1].read_bytes().splitlines()[-1])["hash"]
    assert "intact: 10 records in 2 day files" in report.summary()


def test_an_empty_home_verifies_with_zero_records(tmp_path: Path) -> None:
    report = verify(tmp_path)
    assert report.ok and report.records == 0 and report.files == 0


def test_flipping_any_single_byte_is_detected_at_its_line(tmp_path: Path) -> None:
    files = _populate(tmp_path)
    rng = random.Random(5)
    checked = 0
    for path in files:
        original = path.read_bytes()
        # Every newline (line boundaries), the first and last bytes, and a spread of random positions.
        positions = {0, len(original) - 1}
        positions |= {i for i, byte in enumerate(original) if byte == 0x0A}
        positions |= set(rng.sample(range(len(original)), 150))
        for position in sorted(positions):
            for mask in (0x01, 0x20, 0x80, rng.randrange(1, 256)):
                damaged = bytearray(original)
                damaged[position] ^= mask
                path.write_bytes(bytes(damaged))
                report = verify(tmp_path)
                assert not report.ok, f"{path.name} byte {position} ^ {mask:#x} went unnoticed"
                assert report.first_break is not None
                assert report.first_break.file == path
                assert report.first_break.line == _line_of(original, position)
                checked += 1
        path.write_bytes(original)
    assert checked > 1000
    assert verify(tmp_path).ok


def test_a_removed_record_breaks_the_chain_at_the_next_one(tmp_path: Path) -> None:
    files = _populate(tmp_path)
    lines = files[0].read_bytes().splitlines(keepends=True)
    files[0].write_bytes(b"".join(lines[:2] + lines[3:]))
    report = verify(tmp_path)
    assert report.first_break is not None and report.first_break.line == 3
    assert "does not match the previous record's hash" in report.first_break.problem
    assert report.records == 2


def test_a_removed_day_file_breaks_the_chain_in_the_next_file(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=lambda: DAY1)
    log.append(actor="a", source="tool", tool="t", action="a")
    later = AuditLog(tmp_path, clock=lambda: DAY1 + 86_400)
    later.append(actor="a", source="tool", tool="t", action="a")
    third = AuditLog(tmp_path, clock=lambda: DAY1 + 2 * 86_400)
    third.append(actor="a", source="tool", tool="t", action="a")
    (tmp_path / "audit" / "2026-11-30.jsonl").unlink()
    report = verify(tmp_path)
    assert report.first_break is not None and report.first_break.file.name == "2026-12-01.jsonl"


def test_a_rewritten_record_with_a_fresh_hash_still_breaks_the_chain(tmp_path: Path) -> None:
    files = _populate(tmp_path)
    lines = files[0].read_bytes().splitlines()
    forged = json.loads(lines[1])
    forged["command"] = "rm -rf /"
    forged["hash"] = record_hash(forged)  # a forger can recompute this record's own hash...
    lines[1] = canonical_json(forged).encode()
    files[0].write_bytes(b"\n".join(lines) + b"\n")
    report = verify(tmp_path)
    # ...but the next record still names the original, so the chain breaks right after it.
    assert report.first_break is not None and report.first_break.line == 3
    assert "prev" in report.first_break.problem


def test_duplicate_keys_and_extra_fields_are_named(tmp_path: Path) -> None:
    files = _populate(tmp_path)
    lines = files[0].read_bytes().splitlines()
    record = json.loads(lines[0])
    record["injected"] = True
    record["hash"] = record_hash(record)
    files[0].write_bytes(canonical_json(record).encode() + b"\n" + b"\n".join(lines[1:]) + b"\n")
    report = verify(tmp_path)
    assert report.first_break is not None and report.first_break.line == 1
    assert report.first_break.problem == "unknown field 'injected'"
    assert "BROKEN at 2026-11-29.jsonl line 1" in report.summary()


def _rehashed(line: bytes, **changes: object) -> bytes:
    record = {**json.loads(line), **changes}
    record["hash"] = record_hash(record)
    return canonical_json(record).encode()


def _damage(kind: str, files: list[Path]) -> None:
    older, newest = files
    lines = older.read_bytes().splitlines(keepends=True)
    if kind == "NOT_JSON":
        lines[1] = b"\xef\xbb\xbf" + lines[1]  # a byte-order mark an editor added
    elif kind == "NOT_CANONICAL":
        lines[1] = lines[1][:-1] + b"\r\n"  # saved with Windows line ends
    elif kind == "BAD_FIELD":
        lines[1] = _rehashed(lines[1][:-1], injected=True) + b"\n"
    elif kind == "HASH_MISMATCH":
        lines[1] = lines[1].replace(b"ls -la", b"ls -al")
    elif kind == "EMPTY_LINE":
        lines.insert(1, b"\n")
    elif kind == "PREV_MISMATCH":
        lines[1], lines[2] = lines[2], lines[1]
    elif kind == "DUPLICATE":
        lines.insert(1, lines[0])
    elif kind == "SEQ_GAP":
        lines[1] = _rehashed(lines[1][:-1], seq=7) + b"\n"
    elif kind == "CUT_FILE":
        lines[-1] = lines[-1][:30]
    elif kind == "TORN_TAIL":  # a file system that left zeros past a crash
        newest.write_bytes(newest.read_bytes() + b"\0" * 512)
    older.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    "kind",
    [
        "NOT_JSON",
        "NOT_CANONICAL",
        "BAD_FIELD",
        "HASH_MISMATCH",
        "EMPTY_LINE",
        "PREV_MISMATCH",
        "DUPLICATE",
        "SEQ_GAP",
        "CUT_FILE",
        "TORN_TAIL",
    ],
)
def test_each_kind_of_damage_is_named_by_a_stable_code(tmp_path: Path, kind: str) -> None:
    """What verify found was prose only: a script (cron, CI) could tell "broken" from "intact" by the
    exit status, but not a torn tail the next append settles from an edited or cut file. And a
    cut older file was described as a torn record "the next append discards", which no append
    does (appends go to the newest file). Each break now carries one of ``BREAK_CODES``."""
    files = _populate(tmp_path)
    _damage(kind, files)
    report = verify(tmp_path)
    brk = report.first_break
    assert brk is not None and brk.code == kind, report.summary()
    assert kind in BREAK_CODES and f"[{kind}]" in report.summary()
    assert brk.to_json()["code"] == kind and brk.to_json()["file"] == brk.file.name
    if kind == "CUT_FILE":
        assert "next append" not in brk.problem and brk.file == files[0]


def _cut_last_line(home: Path) -> tuple[Path, bytes]:
    """Leave the newest file as a writer mid-``write()`` would: half its last line on disk."""
    path = sorted((home / "audit").glob("*.jsonl"))[-1]
    data = path.read_bytes()
    cut = len(data) - len(data.splitlines()[-1]) // 2
    path.write_bytes(data[:cut])
    return path, data[cut:]


def test_a_line_finished_while_verify_waits_for_the_lock_is_not_a_break(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(tmp_path)
    path, rest = _cut_last_line(tmp_path)
    real_flock = fcntl.flock

    def writer_finishes_first(fd: int, operation: int) -> None:
        with path.open("ab") as handle:  # the writer completes its line, then releases the lock
            handle.write(rest)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", writer_finishes_first)
    report = verify(tmp_path)
    assert report.ok and report.records == 10


def test_verify_does_not_wait_forever_for_a_stopped_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(tmp_path)
    _cut_last_line(tmp_path)
    monkeypatch.setattr(verification, "LOCK_WAIT_SECONDS", 0.2)
    holder = os.open(tmp_path / "audit" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # a writer stopped while appending
        report = verify(tmp_path)
    finally:
        os.close(holder)
    assert not report.ok and report.first_break is not None and report.first_break.line == 5
    assert "a writer has held the audit lock for over 0.2 s" in report.first_break.problem
    assert report.first_break.code == "WRITER_STALLED"
