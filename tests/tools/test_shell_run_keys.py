"""A run's keys leave as soon as its own guard has judged the line: in a call of several shells,
the first shell's command is typed before the next shell's line is judged, not after every shell
of the call was.

The order is observed, not timed: every ``plan_run`` (the guard's judgement of a line, just before
its keys) and every write to the tmux control client are recorded in the order they happen."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tether.shells import accept
from tether.shells.integration.script import RUN_KEYS
from tether.shells.tmux import control
from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

pytestmark = pytest.mark.timeout(120)

AGENT = CallContext(actor="conv-keys")
# The loader's private key sequence that loads and accepts a run's line (``RUN_KEYS``), sent as hex.
_RUN_KEYS = re.compile("'send-keys' '-t' '(%[0-9]+)' '-H' " + " ".join(f"'{b:02x}'" for b in RUN_KEYS))


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``("plan", pane)`` per judged line and ``("keys", pane)`` per write carrying a run's keys."""
    seen: list[tuple[str, str]] = []
    real_plan = accept.plan_run
    real_flush = control.ControlClient._flush

    async def plan_run(*args: Any, **kwargs: Any) -> accept.RunPlan:
        seen.append(("plan", args[2].pane_id))
        return await real_plan(*args, **kwargs)

    def flush(self: control.ControlClient) -> None:
        data = b"".join(self._out).decode("utf-8", "replace")
        seen.extend(("keys", pane) for pane in _RUN_KEYS.findall(data))
        real_flush(self)

    monkeypatch.setattr(accept, "plan_run", plan_run)
    monkeypatch.setattr(control.ControlClient, "_flush", flush)
    return seen


async def test_the_first_shells_keys_leave_before_the_next_shells_line_is_judged(
    catalog: ToolCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = catalog.registry
    opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}] * 3}, AGENT)
    shells = [t["shell"] for t in opened.structured["tasks"]]
    tasks = [
        {
            "target": {"sessions": s},
            "action": {"kind": "run", "command": f"echo at-{s}"},
            "wait": {"kind": "exit"},
        }
        for s in shells
    ]
    await registry.call("shell_run", {"tasks": tasks}, AGENT)  # every shell at its prompt
    seen = _record(monkeypatch)
    result = await registry.call("shell_run", {"tasks": tasks}, AGENT)
    assert [t["lines"] for t in result.structured["tasks"]] == [[f"at-{s}"] for s in shells]
    plans = [pane for kind, pane in seen if kind == "plan"]
    assert len(plans) == 3 and len(set(plans)) == 3, seen
    # Each shell's keys are written right after its own line was judged, before the next one's.
    assert seen == [(kind, pane) for pane in plans for kind in ("plan", "keys")], seen
