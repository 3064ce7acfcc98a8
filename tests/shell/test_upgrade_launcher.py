"""A confined shell asked of a ``tether mcp --sandbox`` whose package was upgraded under it.

The server runs from a copy of the package; the "upgrade" rewrites the copy's sandbox launcher
(``shell/sandbox/launch.py``, which a confined shell's pane runs by its path) while the server
runs, as pip replaces an installed package's files. No git history is needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client
from sandbox_mcp_harness import open_task, params, run_to_exit

import tether

pytestmark = pytest.mark.timeout(240)


async def test_a_confined_shell_after_an_upgrade_under_the_server_says_to_restart_it(
    tether_home: Path, tmp_path: Path
) -> None:
    # Before: the pane ran the later build's launcher with this server's plan; it failed there
    # (a later build reading a key this one never writes: `bc76189` began to read "bounds"), and
    # shell_open answered "opened … has not shown its first prompt yet" for a shell whose pane had
    # already ended; its first run then said the shell "no longer runs (its bash ended …)".
    home = tmp_path / "home"
    home.mkdir()
    site = tmp_path / "site"
    package = site / "tether"
    shutil.copytree(
        Path(tether.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "static")
    )
    server = params(tether_home, home, "--sandbox", extra_env={"PYTHONPATH": str(site)})
    async with Client(server) as client:
        shell = str((await open_task(client))["shell"])
        assert "before" in "\n".join((await run_to_exit(client, shell, "echo before"))["lines"])

        launcher = package / "shell" / "sandbox" / "launch.py"
        later = launcher.read_text().replace(
            "sys.exit(main(sys.argv))",
            'sys.exit("tether: a later build\'s launcher reads what this one never wrote")',
        )
        assert later != launcher.read_text()
        launcher.write_text(later)

        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        task = (opened.structured_content or {})["tasks"][0]
        assert not task["ok"] and task["errorCode"] == "UNAVAILABLE", task
        assert task["error"].startswith(f"tether's files in {launcher.parent} changed since this server"), (
            task
        )
        assert "Restart this server" in task["error"], task

        # The shell opened before the upgrade runs on (its pane started with the old launcher).
        assert "after" in "\n".join((await run_to_exit(client, shell, "echo after"))["lines"])
