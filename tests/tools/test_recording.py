"""Recordings: a shell's output with its timing as asciicast v2, never holding a vault value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from safety_harness import vault
from shell_harness import open_shell, run, shell_client

from tether.tools.catalog import ToolCatalog
from tether.tools.registry import CallContext

PANEL = CallContext(actor="panel", source="panel")
SECRET = "rec-Secret-8v2Lq"


def parse_cast(text: str) -> tuple[dict[str, Any], list[list[Any]]]:
    lines = text.splitlines()
    header = json.loads(lines[0])
    events = [json.loads(line) for line in lines[1:]]
    return header, events


def _output(events: list[list[Any]]) -> str:
    return "".join(e[2] for e in events if e[1] == "o")


def _completes(events: list[list[Any]], text: str) -> int:
    """The index of the output event with which the output so far first holds ``text`` (the
    masker may hand a line over in several events)."""
    seen = ""
    for i, e in enumerate(events):
        if e[1] == "o":
            seen += e[2]
            if text in seen:
                return i
    raise AssertionError(f"{text!r} never printed")


@pytest.mark.timeout(120)
async def test_a_recording_keeps_text_order_and_pauses_and_masks_secrets(
    tether_home: Path, catalog: ToolCatalog
) -> None:
    vault(tether_home).set("TOKEN", SECRET)
    async with shell_client(tether_home, "conv-rec") as client:
        shell = await open_shell(client, cols=90, rows=20)
        assert (await run(client, shell, "echo first-$((40+1))"))["exitCode"] == 0
        assert (await run(client, shell, "sleep 1; echo second-$((40+2))"))["exitCode"] == 0
        secret_run = await run(client, shell, "echo {{vault.TOKEN}}; echo x{{vault.TOKEN}}y | rev")
        assert secret_run["exitCode"] == 0
        result = await catalog.registry.call("shell_record", {"shell": shell}, PANEL)
    cast = result.structured["cast"]
    header, events = parse_cast(cast)
    assert (header["version"], header["width"], header["height"]) == (2, 90, 20)
    assert header["title"].startswith(shell)
    times = [e[0] for e in events]
    assert times == sorted(times) and times[0] >= 0
    text = _output(events)
    assert text.index("first-41") < text.index("second-42")
    # The shell's own events are gone (nonce and all); everything else a terminal drew is kept.
    assert "\x1b]6973;" not in text and "\x1b[" in text
    # Never a vault value, in any event, in any form the masker knows (here: reversed too).
    assert SECRET not in cast and SECRET[::-1] not in cast and "[vault:TOKEN]" in text
    # A marker at each command's start, labelled with the command; the pause is kept: the second
    # command's output comes at least its sleep after the command started (the shell stamps the
    # start itself; an output time is never earlier than the byte was printed).
    marks = [(e[0], e[2]) for e in events if e[1] == "m"]
    labels = [label for _t, label in marks]
    assert labels[:2] == ["echo first-$((40+1))", "sleep 1; echo second-$((40+2))"]
    second_start = marks[1][0]
    # Markers sit among the output in time: the first command's output comes before the second's.
    where = [i for i, e in enumerate(events) if e[1] == "m"]
    first_out = _completes(events, "first-41\r")
    assert where[0] < first_out < where[1]
    second_out = events[_completes(events, "second-42")][0]
    assert second_out - second_start >= 1.0 - 1e-3
    records = [r for r in (tether_home / "audit").glob("*.jsonl")]
    logged = [json.loads(x) for p in records for x in p.read_text().splitlines()]
    assert [(r["tool"], r["action"], r["targets"]) for r in logged if r["tool"] == "shell_record"] == [
        ("shell_record", "record", [shell])
    ]


@pytest.mark.timeout(120)
async def test_tether_shell_record_writes_the_file(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-rec") as client:
        shell = await open_shell(client)
        assert (await run(client, shell, "echo on-the-cli"))["exitCode"] == 0
    target = tether_home / "out.cast"
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "tether", "shell", "record", shell, "--output", str(target)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"TETHER_HOME": str(tether_home), "PATH": "/usr/bin:/bin"},
        )
    )
    assert done.returncode == 0, done.stderr
    header, events = parse_cast(target.read_text())
    assert header["version"] == 2 and "on-the-cli" in _output(events)
    # Where it cannot be written: one line saying why and what to do, never a traceback.
    for output, line in (
        (
            tether_home / "no" / "x.cast",
            "(No such file or directory); give a file path in a directory you can write",
        ),
        (tether_home, "(Is a directory); give a file path in a directory you can write"),
        (Path("/dev/full"), "(No space left on device); free space there, or give another path"),
    ):
        refused = await anyio.to_thread.run_sync(
            lambda output=output: subprocess.run(
                [sys.executable, "-m", "tether", "shell", "record", shell, "-o", str(output)],
                capture_output=True,
                text=True,
                timeout=60,
                env={"TETHER_HOME": str(tether_home), "PATH": "/usr/bin:/bin"},
            )
        )
        code = "STORAGE_UNAVAILABLE" if output.name == "full" else "INVALID_ARGUMENT"
        assert (refused.returncode, refused.stderr) == (
            2,
            f"tether: {code}: -o {output}: the recording cannot be written there {line}\n",
        )
    timeline = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "tether", "shell", "timeline", shell, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"TETHER_HOME": str(tether_home), "PATH": "/usr/bin:/bin"},
        )
    )
    assert timeline.returncode == 0, timeline.stderr
    commands = json.loads(timeline.stdout)["commands"]
    assert [(c["text"], c["exitCode"], c["by"]) for c in commands] == [("echo on-the-cli", 0, "conv-rec")]
