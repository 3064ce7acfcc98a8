"""The only deadline a test has: a guard against a hang, never a measure of speed.

A test waits for things that will happen (a process to exit, a page to show a badge, a lock to be
granted). How long they take depends on how busy the machine is, so no wait may fail a test that
is still making progress: every in-test deadline is ``HANG_S`` (``HANG_MS`` for Playwright),
just under the per-test timeout in pyproject.toml, so it only ever turns a real hang into a
clearer failure. A test that must show something does *not* happen waits for an event that
proves it (a fifo, a barrier, a stopped process), not for a time.
"""

from __future__ import annotations

HANG_S = 240
HANG_MS = HANG_S * 1000
