"""A shell's phase follows from what the run's own wait read of its log: those bytes are not read
and scanned a second time when the next call asks whether the shell is at its prompt.

What is observed is which bytes the phase reads (``read_range`` as ``tether.shells.domain`` calls
it), not a duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.shells import domain
from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

pytestmark = pytest.mark.timeout(120)

AGENT = CallContext(actor="conv-phase")


async def test_the_next_call_reads_only_what_the_last_wait_did_not(
    catalog: ToolCatalog, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = catalog.registry
    opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, AGENT)
    shell = opened.structured["tasks"][0]["shell"]
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": "echo phase-$((6*7))"},
        "wait": {"kind": "idle"},
    }
    for _ in range(2):  # the first prompts
        await registry.call("shell_run", {"tasks": [task]}, AGENT)
    read: list[int] = []
    real = domain.read_range

    def counted(path: Path, start: int, end: int | None = None) -> bytes:
        data = real(path, start, end)
        read.append(len(data))
        return data

    monkeypatch.setattr(domain, "read_range", counted)
    log = tether_home / "logs" / f"{shell}.log"
    before = log.stat().st_size
    for _ in range(5):
        result = await registry.call("shell_run", {"tasks": [task]}, AGENT)
        assert result.structured["tasks"][0]["lines"] == ["phase-42"], result.text
    grown = log.stat().st_size - before
    # Each run's keys, output and prompt were read by its wait; the phase reads at most what
    # followed the prompt (a redraw, the prompt's text), not the run again.
    assert sum(read) < grown / 3, (sum(read), grown, read)
