"""The home a program gives ``tether.Tether(home=…)`` is the home its commands and shells run for:
``$TETHER_HOME`` in a one-shot command and in a persistent shell is that directory, whatever the
program's own environment says (unset for the default home, or naming another)."""

from __future__ import annotations

from pathlib import Path

import pytest
from library_programs import open_shell, run_in_shell

import tether


@pytest.mark.parametrize("environment", ["unset", "another home"])
async def test_commands_and_shells_see_the_home_the_program_named(
    tether_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    environment: str,
) -> None:
    if environment == "unset":
        monkeypatch.delenv("TETHER_HOME")
    else:
        monkeypatch.setenv("TETHER_HOME", str(tmp_path_factory.mktemp("other")))
    async with tether.Tether(home=tether_home) as t:
        one_shot = await t.call(
            "bash", {"command": 'printf %s "$TETHER_HOME"', "description": "show the home"}
        )
        assert one_shot.structured["stdout"]["text"] == str(tether_home)
        shell = await open_shell(t)
        assert await run_in_shell(t, shell, 'printf "<%s>\\n" "$TETHER_HOME"') == [f"<{tether_home}>"]
        await t.call(
            "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
