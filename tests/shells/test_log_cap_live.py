"""A shell printing far more than ``[sessions] log_max_bytes``: the log's disk use stays near the
cap while its offsets stay valid, and the newest output is read exactly."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from shell_harness import call, open_shell, run, shell_client

CAP = 1024 * 1024


async def test_log_cap_holds_while_a_shell_prints(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text(f"[sessions]\nlog_max_bytes = {CAP}\n")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(client, shell, "seq 1 600000", wait={"kind": "exit", "timeoutMs": 60000})
        assert out["exitCode"] == 0
        log = tether_home / "logs" / f"{shell}.log"
        assert log.stat().st_size > 4 * CAP  # offsets never shift: the file keeps its length
        assert log.stat().st_blocks * 512 <= 2 * CAP  # but only about the cap is on disk
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read", "mode": "history"},
                        "output": {"lines": 2000},
                    }
                ]
            },
        )
        lines = data["tasks"][0]["lines"]
        numbers = [int(x) for x in lines if x.isdigit()]
        assert numbers[-1] == 600000 and numbers == list(range(numbers[0], 600001)) and len(numbers) >= 1998
