"""Forward-secure seals: a history rewritten with every hash recomputed is caught, at the first
record past the last seal that holds — as an attacker with the user's rights and the sealing key
on disk (but not the verification key) would rewrite it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hang import HANG_S
from tether.audit import AuditError, AuditLog, SealKey, parse_verification_key, verify
from tether.audit.record import canonical_json, record_hash
from tether.audit.seal import KEY_NAME, read_writer_key, seal_extra
from tether.cli.door import stop_door
from tether.errors import UsageError

EVERY = 4
TETHER = str(Path(sys.executable).parent / "tether")
Records = list[dict[str, Any]]


def _populate(home: Path, count: int = 22) -> SealKey:
    log = AuditLog(home)
    for index in range(2):  # records written before sealing began are covered by the first seal
        log.append(actor="conv-a", source="tool", tool="bash", action="run", command=f"early {index}")
    key = log.setup_keys(every=EVERY)
    for index in range(count):
        log.append(actor="conv-a", source="tool", tool="bash", action="run", command=f"echo {index}")
    return key


def _read(home: Path) -> Records:
    [path] = sorted((home / "audit").glob("*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rewrite(home: Path, records: Records) -> None:
    """Write ``records`` back with seq, prev and hash recomputed: a consistent chain."""
    [path] = sorted((home / "audit").glob("*.jsonl"))
    prev = "0" * 64
    lines = []
    for seq, record in enumerate(records, start=1):
        record = {**record, "seq": seq, "prev": prev}
        record["hash"] = record_hash(record)
        prev = record["hash"]
        lines.append(canonical_json(record))
    path.write_text("".join(line + "\n" for line in lines))


def _first_command(records: Records, text: str) -> int:
    return next(i for i, r in enumerate(records) if r["command"] == text)


def _edit(records: Records) -> Records:
    records[_first_command(records, "echo 5")]["command"] = "echo innocent"
    return records


def _delete(records: Records) -> Records:
    del records[_first_command(records, "echo 5")]
    return records


def _insert(records: Records) -> Records:
    at = _first_command(records, "echo 5")
    records.insert(at, {**records[at], "command": "echo inserted"})
    return records


def _reorder(records: Records) -> Records:
    a, b = _first_command(records, "echo 5"), _first_command(records, "echo 6")
    records[a], records[b] = records[b], records[a]
    return records


def _drop_seal(records: Records) -> Records:
    seal = next(i for i, r in enumerate(records) if r["action"] == "seal" and r["seq"] > 8)
    del records[seal]
    return records


def _edit_early(records: Records) -> Records:
    records[0]["command"] = "early rewritten"  # before setup-keys: still under the first seal
    return records


Tamper = Callable[[Records], Records]
TAMPERS: dict[str, Tamper] = {
    "edit": _edit,
    "delete": _delete,
    "insert": _insert,
    "reorder": _reorder,
    "drop a seal": _drop_seal,
    "edit before setup": _edit_early,
}


@pytest.mark.parametrize("kind", TAMPERS)
def test_rehashed_tampering_breaks_past_the_last_valid_seal(tmp_path: Path, kind: str) -> None:
    key = _populate(tmp_path)
    assert verify(tmp_path, key=key).ok
    original = _read(tmp_path)
    _rewrite(tmp_path, TAMPERS[kind]([dict(r) for r in original]))
    plain = verify(tmp_path)
    assert plain.ok, "the chain alone cannot tell: every hash was recomputed"
    report = verify(tmp_path, key=key)
    assert not report.ok and report.first_break is not None
    brk = report.first_break
    assert report.sealed_through is not None
    # Everything up to the last proven seal is the original; the break names the record after it.
    assert brk.seq == report.sealed_through + 1
    assert _read(tmp_path)[: report.sealed_through] == original[: report.sealed_through]
    assert "records before seq" in brk.problem and "recomputed" in brk.problem


def test_the_writers_key_cannot_reseal_a_rewritten_history(tmp_path: Path) -> None:
    """The attacker also re-seals: it recomputes every seal's MAC with the key it finds on disk."""
    key = _populate(tmp_path)
    stolen = read_writer_key(tmp_path / "audit")
    assert stolen is not None and stolen.index > key.index
    records = _edit([dict(r) for r in _read(tmp_path)])
    [path] = sorted((tmp_path / "audit").glob("*.jsonl"))
    prev, lines = "0" * 64, []
    for seq, record in enumerate(records, start=1):
        record = {**record, "seq": seq, "prev": prev}
        if record["action"] == "seal":
            index = seq // EVERY
            # The best it can do: a key for this index, if the stolen one could reach it.
            forged = stolen if index < stolen.index else stolen.at(index)
            record["extra"] = {**record["extra"], "mac": forged.mac(prev, seq)}
        record["hash"] = record_hash(record)
        prev = record["hash"]
        lines.append(canonical_json(record))
    path.write_text("".join(line + "\n" for line in lines))
    report = verify(tmp_path, key=key)
    assert not report.ok and report.first_break is not None
    assert report.first_break.seq == (report.sealed_through or 0) + 1
    with pytest.raises(ValueError):
        stolen.at(key.index)  # one-way: the stolen key cannot reach back


def test_seals_sit_at_fixed_positions_and_cover_the_log(tmp_path: Path) -> None:
    key = _populate(tmp_path)
    records = _read(tmp_path)
    seals = [r for r in records if r["action"] == "seal"]
    assert [r["seq"] for r in seals] == [s for s in range(1, len(records) + 1) if s % EVERY == 0]
    report = verify(tmp_path, key=key)
    assert report.ok and report.sealed_through == seals[-1]["seq"]
    assert f"proven by its seals through record seq {seals[-1]['seq']}" in report.summary()
    assert "seals not checked: give --key" in verify(tmp_path).summary()
    mode = (tmp_path / "audit" / KEY_NAME).stat().st_mode & 0o777
    assert mode == 0o600


def test_a_writer_dead_before_persisting_the_next_key_steps_past_it(
    tmp_path: Path,
) -> None:
    key = _populate(tmp_path, count=1)  # records 1-3 written, the first seal comes at seq 4
    audit = tmp_path / "audit"
    before = read_writer_key(audit)
    assert before is not None
    log = AuditLog(tmp_path)
    log.append(actor="conv-a", source="tool", tool="bash", action="run", command="sealed next")
    # Simulate the crash: the seal at seq 4 is on disk, the key file still holds its key.
    from tether.audit.seal import write_writer_key

    write_writer_key(audit, before)
    for index in range(8):
        log.append(actor="conv-a", source="tool", tool="bash", action="run", command=f"after {index}")
    assert verify(tmp_path, key=key).ok
    _extra, following = seal_extra(before, prev="0" * 64, seq=4)
    assert following.index == 2


@pytest.mark.parametrize("edit", ["ahead", "every 0", "short key", "index 0"])
def test_a_sealing_key_that_cannot_seal_refuses_the_batch_and_leaves_nothing(
    tmp_path: Path, edit: str
) -> None:
    """A ``seal.key`` for a later seal than the chain has reached (replaced, or the day files
    restored from an older copy) raised a bare ``ValueError`` in the middle of a batch, after the
    batch's first records were written: they stayed in the log, chained, though their callers were
    told the append failed. A zero ``every`` raised ``ZeroDivisionError``; a short key sealed on.
    Now each is ``AUDIT_UNAVAILABLE`` saying what is wrong, and the file is as before."""
    key = _populate(tmp_path, count=1)  # records 1-3; the first seal comes at seq 4
    audit = tmp_path / "audit"
    writer = read_writer_key(audit)
    assert writer is not None
    data = {"every": writer.every, "index": writer.index, "key": writer.key.hex()}
    data.update(
        {
            "ahead": {"index": writer.index + 5, "key": writer.at(writer.index + 5).key.hex()},
            "every 0": {"every": 0},
            "short key": {"key": "ab"},
            "index 0": {"index": 0},
        }[edit]
    )
    (audit / KEY_NAME).write_text(json.dumps(data))
    [day] = sorted(audit.glob("*.jsonl"))
    before = day.read_bytes()
    log = AuditLog(tmp_path)
    bodies = [
        log.body(actor="conv-a", source="tool", tool="bash", action="run", command=f"b{i}") for i in range(3)
    ]
    with pytest.raises(AuditError, match="sealing key") as caught:
        log.append_bodies(bodies)
    assert caught.value.code == "AUDIT_UNAVAILABLE"
    assert "disk space" not in caught.value.message and "Errno" not in caught.value.message
    assert day.read_bytes() == before
    assert verify(tmp_path, key=key).ok


def test_setup_refuses_twice_and_bad_keys_are_named(tmp_path: Path) -> None:
    _populate(tmp_path, count=1)
    with pytest.raises(UsageError, match="already set up"):
        AuditLog(tmp_path).setup_keys(every=EVERY)
    for bad in ("", "tak1-4-1-zz", "tak2-4-1-" + "0" * 64, "tak1-1-1-" + "0" * 64):
        with pytest.raises(UsageError, match="tak1-EVERY-INDEX-HEX"):
            parse_verification_key(bad)


def test_cli_setup_keys_and_verify_with_the_key(tmp_path: Path) -> None:
    try:
        _setup_keys_and_verify(tmp_path)
    finally:
        stop_door(tmp_path)  # the home's tools process, which the commands started


def _setup_keys_and_verify(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tmp_path)}
    setup = subprocess.run(
        [TETHER, "audit", "setup-keys", "--every", "2"], env=env, capture_output=True, text=True, timeout=60
    )
    assert setup.returncode == 0, setup.stderr
    printed = next(line.strip() for line in setup.stdout.splitlines() if line.strip().startswith("tak1-"))
    log = AuditLog(tmp_path)
    for index in range(5):
        log.append(actor="cli", source="cli", tool="bash", action="run", command=f"c{index}")
    ok = subprocess.run(
        [TETHER, "audit", "verify", "--key", printed], env=env, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0 and "proven by its seals through record seq" in ok.stdout, ok.stdout + ok.stderr
    records = _edit_first_run(_read(tmp_path))
    _rewrite(tmp_path, records)
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(printed + "\n")
    broken = subprocess.run(
        [TETHER, "audit", "verify", "--key-file", str(keyfile)],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert broken.returncode == 1 and "BROKEN" in broken.stdout and "records before seq" in broken.stdout
    again = subprocess.run(
        [TETHER, "audit", "setup-keys"], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 2 and "already set up" in again.stderr


def _edit_first_run(records: Records) -> Records:
    records[_first_command(records, "c0")]["command"] = "c0 rewritten"
    return records


def test_cli_an_empty_or_doubled_key_is_refused_not_skipped(tmp_path: Path) -> None:
    # `--key "$KEY"` with KEY unset (or an empty key file) verified without the seals, said "intact"
    # and exited 0 as if they had been proven; `--key` beside `--key-file` lost one of the two.
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home")}
    cases = {
        ("--key", ""): "--key is empty",
        ("--key", "  "): "--key is empty",
        ("--key-file", str(empty)): f"--key-file {empty} is empty",
        ("--key", "tak1-x", "--key-file", str(empty)): "not allowed with argument",
    }
    try:
        for args, message in cases.items():
            done = subprocess.run(
                [TETHER, "audit", "verify", *args], env=env, capture_output=True, text=True, timeout=HANG_S
            )
            assert (done.returncode, done.stdout) == (2, ""), done
            assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
        every = subprocess.run(
            [TETHER, "audit", "setup-keys", "--every", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert (
            every.returncode == 2 and "--every must be a whole number of records, at least 1" in every.stderr
        )
    finally:
        stop_door(tmp_path / "home")
