"""Where the loader leaves readline's cursor: at the start of a run's line, at the end of a held one.

A run's line is accepted at once, so where its cursor stands shows nowhere; but in a UTF-8
locale bash turns a ``READLINE_POINT`` of N characters into bytes by scanning the rest of the
line once per character, so a cursor put at the end of a 1 MB command cost 16 s (at the start:
nothing). A held line (incomplete: the next line continues it) keeps its cursor at the end.
What stands where is read back exactly as bash holds it: text inserted at the cursor, then the
reporter's copy of readline's line."""

from __future__ import annotations

from pathlib import Path

from tether.shells import Shells, open_shell
from tether.shells.accept import report
from tether.shells.integration import payload
from tether.shells.integration.script import INSERT_KEYS, LOAD_KEYS


async def _line_after(shells: Shells, shell_id: str, loaded: str) -> str:
    host, pane = await shells.pane(shell_id)
    await host.type_keys_then_text(pane, LOAD_KEYS, loaded)
    answer = await report(shells, host, pane, INSERT_KEYS, payload.insert_payload("#"))
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.run_payload(0, ""))  # the line emptied
    return answer.line


async def test_a_runs_line_has_its_cursor_at_the_start_and_a_held_one_at_the_end(
    home_shells: Shells, tmp_path: Path
) -> None:
    shell, _ = await open_shell(
        home_shells, owner="t", label="x", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=0
    )
    assert await _line_after(home_shells, shell.id, payload.run_payload(7, "echo é")) == "#echo é"
    assert await _line_after(home_shells, shell.id, payload.held_payload("cat <<EOF\n")) == "cat <<EOF\n#"
