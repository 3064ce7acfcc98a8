"""The panel's tool actions are audited exactly once (by the registry's middleware, as ``panel``),
its list refresh not at all, and a panel write takes the same safety path as an agent's."""

from __future__ import annotations

import json
from pathlib import Path

from panel_harness import browserless, serving_tools


def _records(home: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted((home / "audit").glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


async def test_a_panel_tool_action_is_one_record_and_the_list_refresh_none(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as page:
        opened = await page.post("/panel/api/shells", json={"label": "once"})
        assert opened.status_code == 200, opened.text
        shell = opened.json()["id"]
        for _ in range(3):  # each list read may refresh shell_state; none of it is an action
            listed = await page.get("/panel/api/shells")
            assert shell in [r["id"] for r in listed.json()["shells"]]
        locked = await page.post(f"/panel/api/shells/{shell}/lock", json={"reason": "mine now"})
        assert locked.status_code == 200
    records = [r for r in _records(tether_home) if r["source"] == "panel" and r["action"] != "login"]
    assert [(r["actor"], r["tool"], r["action"], r["targets"]) for r in records] == [
        ("panel", "shell_open", "open", [shell]),
        ("panel", "shell_lock", "lock", [shell]),
    ]
    assert not [r for r in _records(tether_home) if r["tool"] == "shell_state"]
