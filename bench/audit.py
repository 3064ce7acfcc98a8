"""Audit query cost on a large log: filtered full-window queries against reading the log once.

    .venv/bin/python bench/audit.py [--records N] [--days D]

Writes a chained log of N records (default 400,000, about 170 MB) over D day files straight to a
temporary ``TETHER_HOME`` (as ``AuditLog`` would, minus the per-record fsync), then times
``shell_audit``-style queries that must look at the whole window because (almost) nothing matches:
an unknown actor, a rare shell, a rare source. Baselines in the same run: reading every day file
once (``read()``), and decoding every record (what a query cost before the needle search).
Budget: each such query ≤ 3 s, and ≤ 2 × one read of the log. Exits 1 if a budget failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from tether.audit import query
from tether.audit.query import _records_reverse
from tether.audit.record import FORMAT_VERSION, GENESIS_HASH, canonical_json, iso_time, record_hash

DAY_MS = 86_400_000


def write_log(home: Path, records: int, days: int) -> list[Path]:
    audit = home / "audit"
    audit.mkdir(parents=True)
    now_ms = int(time.time() * 1000)
    start = now_ms - days * DAY_MS + 60_000
    step = max(1, (now_ms - start) // records)
    prev, files, handle, day = GENESIS_HASH, [], None, ""
    for seq in range(1, records + 1):
        ts = start + (seq - 1) * step
        name = iso_time(ts)[:10] + ".jsonl"
        if name != day:
            if handle is not None:
                handle.close()
            day = name
            files.append(audit / name)
            handle = (audit / name).open("w", encoding="ascii")
        record = {
            "v": FORMAT_VERSION,
            "seq": seq,
            "time": iso_time(ts),
            "ts": ts,
            "actor": f"conv-{seq % 50:04d}",
            "source": "panel" if seq == records // 2 else "tool",
            "tool": "shell_run",
            "action": "run",
            "targets": ["dsh-rare00" if seq == 7 else f"dsh-{seq % 8:06d}"],
            "command": f"make -j8 test TARGET=module-{seq % 997} && echo done {seq}",
            "outcome": "ok",
            "detail": "exit 0 after 1234 ms",
            "reason": None,
            "flags": [],
            "extra": {"n": seq},
            "prev": prev,
        }
        record["hash"] = prev = record_hash(record)
        assert handle is not None
        handle.write(canonical_json(record) + "\n")
    if handle is not None:
        handle.close()
    return files


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-audit-") as tmp:
        home = Path(tmp)
        files = write_log(home, args.records, args.days)
        size = sum(p.stat().st_size for p in files)
        read_s, _ = _timed(lambda: [p.read_bytes() for p in files])

        def decode_all() -> int:
            count = 0
            for path in files:
                with closing(_records_reverse(path)) as records:
                    count += sum(1 for _ in records)
            return count

        decode_s, decoded = _timed(decode_all)
        print(f"log: {args.records} records, {len(files)} day files, {size / 1e6:.0f} MB")
        print(f"baseline read every file once        {read_s:8.3f} s")
        print(f"decode every record (the old scan)   {decode_s:8.3f} s  ({decoded} records)")
        failed = False
        cases: dict[str, dict[str, str]] = {
            "actor that never logged": {"actor": "conv-nobody"},
            "a shell targeted once": {"shell": "dsh-rare00"},
            "the one panel record": {"source": "panel"},
        }
        for name, filters in cases.items():
            start = time.perf_counter()
            found = query(home, days=args.days + 1, limit=20, **filters)  # type: ignore[arg-type]
            seconds = time.perf_counter() - start
            ok = seconds <= 3 and seconds <= 2 * read_s + 0.05
            failed |= not ok
            print(
                f"{'PASS' if ok else 'FAIL'}  {name:30} {seconds:8.3f} s  "
                f"{seconds / read_s:6.2f}x read, {decode_s / seconds:6.1f}x faster than decoding "
                f"({len(found)} found)"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
