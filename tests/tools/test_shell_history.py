"""Reading a long shell log through the MCP client: history pages and merged search windows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from shell_harness import call, open_shell, run, shell_client

LINES = 60_000  # about 2 MB of log: many pages, several megabyte-scale offsets


async def _read(client: Any, shell: str, action: dict[str, Any], lines: int | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"target": {"sessions": shell}, "action": {"kind": "read", **action}}
    if lines is not None:
        task["output"] = {"lines": lines}
    _, data = await call(client, "shell_read", {"tasks": [task]})
    result: dict[str, Any] = data["tasks"][0]
    assert result["ok"], result
    return result


async def test_history_pages_read_the_whole_log_exactly_once(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(
            client, shell, f"seq -f 'row %06g padding-padding-padding' 1 {LINES}", output={"lines": 1}
        )
        assert out["exitCode"] == 0
        assert (tether_home / "logs" / f"{shell}.log").stat().st_size > 2_000_000
        # output.lines is honoured, and the result says how to read what it left out.
        newest = await _read(client, shell, {"mode": "history"}, lines=5)
        note, *shown = newest["lines"]
        assert len(shown) == 5 and isinstance(newest["before"], int)
        assert note == (
            f"[{note.split()[0][1:]} earlier lines not shown; read them with "
            f'action {{ "kind": "read", "mode": "history", "before": {newest["before"]} }}]'
        )
        # Follow the cursor back to the start: every row once, in order, none lost or repeated.
        pages: list[list[str]] = []
        before: int | None = None
        while True:
            page = await _read(
                client, shell, {"mode": "history", **({"before": before} if before else {})}, 2000
            )
            lines = page["lines"]
            if page["before"] is None:
                pages.append(lines)
                break
            assert lines[0].startswith("[") and f'"before": {page["before"]} }}]' in lines[0]
            # A full page: output.lines lines, or as many as the result's byte budget holds.
            assert 1000 <= len(lines) - 1 <= 2000, len(lines)
            pages.append(lines[1:])
            before = page["before"]
        everything = [line for page in reversed(pages) for line in page]
        rows = [int(m.group(1)) for line in everything if (m := re.fullmatch(r"row (\d{6}) padding.*", line))]
        assert rows == list(range(1, LINES + 1))
        assert len(pages) >= LINES // 2000
        # A before past the log's end is refused, naming the field.
        result = await client.call_tool(
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read", "mode": "history", "before": 10**12},
                    }
                ]
            },
        )
        text = "".join(getattr(block, "text", "") for block in result.content)
        assert result.is_error and "tasks[0].action.before" in text and "past the end" in text


async def test_search_context_merges_overlapping_windows(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        await run(client, shell, "seq 1 40")
        found = await _read(client, shell, {"search": "^(10|12|15|30)$", "context": 2})
        lines = found["lines"]
        # Log line numbers run ahead of seq's values by what precedes them (the echoed command).
        shift = int(next(x for x in lines if x.endswith(": 10")).split(":")[0]) - 10
        assert lines == [
            "4 matches, 4 on this page, from 0; no more",
            *_numbered(range(8, 18), shift, hits={10, 12, 15}),
            "--",
            *_numbered(range(28, 33), shift, hits={30}),
        ]
        # Paging by matchOffset stays exact: two per page, every hit once.
        first = await _read(client, shell, {"search": "^(10|12|15|30)$", "context": 2}, lines=2)
        assert first["lines"] == [
            "4 matches, 2 on this page, from 0; next: matchOffset=2",
            *_numbered(range(8, 15), shift, hits={10, 12}),
        ]
        second = await _read(
            client, shell, {"search": "^(10|12|15|30)$", "context": 2, "matchOffset": 2}, lines=2
        )
        assert second["lines"] == [
            "4 matches, 2 on this page, from 2; no more",
            *_numbered(range(13, 18), shift, hits={15}),
            "--",
            *_numbered(range(28, 33), shift, hits={30}),
        ]


def _numbered(values: range, shift: int, *, hits: set[int]) -> list[str]:
    return [f"{v + shift}{':' if v in hits else '-'} {v}" for v in values]
