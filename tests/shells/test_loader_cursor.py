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


async def test_text_typed_at_the_end_leaves_the_cursor_there_and_the_reporter_moves_nothing(
    home_shells: Shells, tmp_path: Path
) -> None:
    shell, _ = await open_shell(
        home_shells, owner="t", label="x", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=0
    )
    host, pane = await home_shells.pane(shell.id)
    # Typed on an empty line, then more: each lands at the end (a cursor left behind would put
    # the second text before the first).
    await host.type_keys_then_text(pane, INSERT_KEYS, payload.insert_payload("echo é"))
    assert (await report(home_shells, host, pane, INSERT_KEYS, payload.insert_payload("!"))).line == "echo é!"
    # The reporter's own answer leaves the cursor where it was: at the end here ...
    assert (
        await report(home_shells, host, pane, INSERT_KEYS, payload.insert_payload("?"))
    ).line == "echo é!?"
    # ... and at the start of a run's line, where text typed next goes before the rest.
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.run_payload(0, "ls é"))
    await report(home_shells, host, pane)
    assert (await report(home_shells, host, pane, INSERT_KEYS, payload.insert_payload("#"))).line == "#ls é"
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.run_payload(0, ""))


async def test_a_megabyte_of_text_reaches_the_reporter(home_shells: Shells, tmp_path: Path) -> None:
    # shell_send's text is typed at the cursor, and the guard asks the reporter for the line
    # before Enter. With the cursor put at the end of the line by number, bash spent its time
    # turning that number into bytes (quadratic: 16 s a megabyte here) and the reporter was not
    # heard from within its 5 s: shell_send refused 1 MB of text ("did not show the guard its
    # command line"), and the shell stayed busy half a minute.
    shell, _ = await open_shell(
        home_shells, owner="t", label="x", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=0
    )
    host, pane = await home_shells.pane(shell.id)
    text = "echo " + "é" * 1_000 + "a" * 1_000_000
    answer = await report(home_shells, host, pane, INSERT_KEYS, payload.insert_payload(text))
    assert answer.line == text
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.run_payload(0, ""))
