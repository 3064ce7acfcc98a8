"""Terminal-text rendering cost: ``render_text`` on ``\\r``-heavy output, against the input size.

    .venv/bin/python bench/termtext.py [--mb 1]

Renders shapes that were quadratic before (a long line ahead of a ``\\r``, a ``\\r`` then one long
line, progress bars, long blank runs, tabs) at ¼, ½ and 1 × the size, and prints seconds and
the ratio of each size's time to the ¼ size's (linear: ≈ 2 and ≈ 4; quadratic: ≈ 4 and ≈ 16),
plus the time per MB against a plain ``bytes.decode`` of the same input. Budget: every 1 × / ¼
ratio ≤ 6 (linear with noise). Exits 1 if a budget failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial

from tether.shells.termtext import render_text


def _shapes(size: int) -> dict[str, bytes]:
    return {
        "line then \\r": b"x" * (size - 2) + b"\n\r",
        "\\r then line": b"\r" + b"y" * (size - 1),
        "progress bar": b"".join(b"\rprogress %6d%%" % i for i in range(size // 16)),
        "bar over a long line": b"z" * (size // 2) + b"\ra" * (size // 4),
        "blank run": b" " * (size - 1) + b"x",
        "tabs": b"\t" * (size - 1) + b"x",
        "backspaces": b"ab\b" * (size // 3),
    }


def _best(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    full = int(args.mb * 1_000_000)
    sizes = (full // 4, full // 2, full)
    failed = False
    print(f"{'shape':22} {'¼ s':>8} {'½ s':>8} {'1× s':>8} {'½/¼':>6} {'1×/¼':>6} {'×decode':>8}")
    inputs = [_shapes(size) for size in sizes]
    for name in inputs[0]:
        times = [_best(partial(render_text, shapes[name]), args.rounds) for shapes in inputs]
        decode = _best(partial(inputs[2][name].decode, "utf-8", "replace"), args.rounds)
        ratio = times[2] / max(times[0], 1e-9)
        failed |= ratio > 6
        print(
            f"{name:22} {times[0]:8.4f} {times[1]:8.4f} {times[2]:8.4f} "
            f"{times[1] / max(times[0], 1e-9):6.2f} {ratio:6.2f} {times[2] / max(decode, 1e-9):8.1f}"
        )
    print("budget (1×/¼ ≤ 6):", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
