"""Credentials in the server's environment are readable by none of the commands it starts: not in
their environment, not in ``/proc/$PPID/environ``, not in any tether process's environ — one-shot
confined and unconfined, and persistent shells (whose parent is the tmux server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_mcp_harness import PLAIN_NAME, bash, environ_of, plant, server, shell_command, tether_processes

from tether.config import EnvSection
from tether.process.env import is_scrubbed, scrub_patterns

pytestmark = pytest.mark.timeout(180)
# Prints only lines that matter (the plain marker, anything planted): the output stays short.
LOOK = (
    f"echo \"--- parent $PPID\"; tr '\\0' '\\n' < /proc/$PPID/environ | grep -E '^{PLAIN_NAME}=|planted'; "
    "echo '--- own'; env | grep planted; "
    "echo '--- every process'; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep planted; echo end"
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "tools" / "bin").mkdir(parents=True)
    return tmp_path / "home"


def test_every_planted_name_is_one_the_scrub_removes() -> None:
    env, _ = plant()
    patterns = scrub_patterns(EnvSection())
    assert [name for name, value in env.items() if not is_scrubbed(name, value, patterns)] == [PLAIN_NAME]


def _assert_hidden(text: str, env: dict[str, str], values: list[str], tether_home: Path) -> None:
    leaked = [value for value in values if value in text]
    assert leaked == [], f"{len(leaked)} of {len(values)} planted credentials visible"
    # The parent's environ was really read — unless the command container's PID namespace hides
    # the server altogether (the parent of a command born there is PID 0 inside).
    parent = text.split("--- parent ", 1)[1]
    assert env[PLAIN_NAME] in parent or parent.startswith("0\n"), parent
    pids = tether_processes(tether_home)
    assert pids, "no tether process found by its TETHER_HOME"
    for pid in pids:
        raw = environ_of(pid)
        assert [v for v in values if v.encode() in raw] == [], f"pid {pid} shows planted credentials"


@pytest.mark.parametrize("door", [["--sandbox"], []], ids=["confined", "unconfined"])
async def test_a_one_shot_command_sees_no_planted_credential(
    tether_home: Path, home: Path, door: list[str]
) -> None:
    env, values = plant()
    async with server(tether_home, home, *door, extra_env=env) as client:
        text, _ = await bash(client, LOOK)
        _assert_hidden(text, env, values, tether_home)


async def test_a_persistent_shell_sees_no_planted_credential(tether_home: Path, home: Path) -> None:
    env, values = plant()
    async with server(tether_home, home, extra_env=env) as client:
        task = await shell_command(client, LOOK)
        output = "\n".join(task["lines"])
        assert task["exitCode"] == 0 and "end" in task["lines"], task
        _assert_hidden(output, env, values, tether_home)
        # The server, the tmux server and its control client, the shell: all checked above.
        assert len(tether_processes(tether_home)) >= 4
