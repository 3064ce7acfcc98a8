"""tether upgraded (``pip install -U``) under a ``tether mcp`` that keeps running, as a real subprocess
driven by the SDK client.

The server runs from a copy of the package in the test's directory; the "upgrade" rewrites a module
of that copy while the server runs, as pip replaces the files of an installed package: the server
keeps what it imported, and anything that starts a Python process of tether's from then on reads
the new files. No git history is needed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mcp import Client
from mcp_harness import text_of
from test_cli_front_doors import stdio_params

import tether

# A later build's renderer whose search and match take what this server gives them no longer.
_LATER_BUILD = """

def search(*args, **kwargs):
    raise RuntimeError("a later build's search")


def match_lines(*args, **kwargs):
    raise RuntimeError("a later build's match_lines")
"""


async def test_a_search_or_match_after_an_upgrade_under_the_server_says_to_restart_it(
    tether_home: Path, tmp_path: Path
) -> None:
    # Before: the render worker, started from the files on disk, ran the later build's functions
    # with this server's arguments — every `read.search` and `wait: match` was `INTERNAL` (an old
    # server's vault masker met a later SecretMasker: "'SecretMasker' object has no attribute
    # '_edges'"), and a later build that still ran could mask by rules the server never had.
    site = tmp_path / "site"
    package = site / "tether"
    shutil.copytree(
        Path(tether.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "static")
    )
    params = stdio_params(tether_home)
    assert params.env is not None
    params.env["PYTHONPATH"] = str(site)
    async with Client(params) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", "cwd": "/"}}]})
        (shell,) = re.findall(r"opened (dsh-\w+)", text_of(opened))
        target = {"sessions": shell}
        ran = await client.call_tool(
            "shell_run",
            {"tasks": [{"target": target, "action": {"kind": "run", "command": "echo marker-$((6*7))"}}]},
        )
        assert not ran.is_error and "marker-42" in text_of(ran), text_of(ran)

        reading = package / "shells" / "reading.py"
        reading.write_text(reading.read_text() + _LATER_BUILD)

        searched = await client.call_tool(
            "shell_read", {"tasks": [{"target": target, "action": {"kind": "read", "search": "marker-42"}}]}
        )
        text = text_of(searched)
        assert searched.is_error and searched.structured_content is not None, text
        assert searched.structured_content["tasks"][0]["errorCode"] == "UNAVAILABLE", text
        assert f"error: tether's files in {package} changed since this server (pid" in text, text
        assert "Restart this server" in text, text

        # The command of a run that waits for a pattern is typed and runs; the wait says why it
        # could not look for the pattern.
        matched = await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {
                        "target": target,
                        "action": {"kind": "run", "command": "echo typed-$((6*7))"},
                        "wait": {"kind": "match", "pattern": "typed-42"},
                    }
                ]
            },
        )
        text = text_of(matched)
        assert "INTERNAL" not in text and "the pattern could not be tried: tether's files in" in text, text

        # Everything that needs no worker goes on.
        ran = await client.call_tool(
            "shell_run", {"tasks": [{"target": target, "action": {"kind": "run", "command": "echo after"}}]}
        )
        assert not ran.is_error and "after" in text_of(ran), text_of(ran)
        screen = await client.call_tool(
            "shell_read", {"tasks": [{"target": target, "action": {"kind": "read", "mode": "screen"}}]}
        )
        assert not screen.is_error and "typed-42" in text_of(screen), text_of(screen)
