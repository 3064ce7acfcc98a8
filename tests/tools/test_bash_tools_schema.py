"""The bash tool's published schema in every configuration, its hot-switch, and bad-input errors (via MCP)."""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from bash_tools_harness import connected, make_setup, text_of
from mcp.client.session import IncomingMessage

from hang import HANG_S
from tether.jobs.registry import JobRegistry
from tether.shell import LocalPwshExecutor, LocalShellOptions
from tether.tools.bash import ShellToolOptions, ShellToolPlugin

BASE = {"command", "description", "timeoutMs", "workdir"}


async def test_schema_in_each_configuration(tether_home: Path) -> None:
    for jobs, background, promote, confining in itertools.product([True, False], repeat=4):
        setup = make_setup(
            tether_home, jobs=jobs, background=background, promote=promote, confining=confining
        )
        async with connected(setup) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        label = f"jobs={jobs} background={background} promote={promote} confining={confining}"
        schema = tools["bash"].input_schema
        expected = set(BASE)
        if confining:
            expected |= {"sandbox_permissions", "justification"}
        if background and jobs:
            expected.add("run_in_background")
        assert set(schema["properties"]) == expected, label
        assert schema["required"] == ["command", "description"], label
        assert schema["additionalProperties"] is False
        assert "stdout_max_bytes" not in str(schema)
        timeout_text = schema["properties"]["timeoutMs"]["description"]
        if promote and jobs:
            assert "moves to a background job" in timeout_text, label
        else:
            assert "it is killed" in timeout_text, label
        output = tools["bash"].output_schema
        assert output is not None
        kinds = [branch["properties"]["kind"]["const"] for branch in output["oneOf"]]
        assert kinds == ["foreground", "promoted", "background"]
        assert ("job_output" in tools) is jobs, label
        description = tools["bash"].description or ""
        assert "fresh non-interactive" in description and "`description`" in description


async def test_schema_hot_switch_follows_the_job_registry(tether_home: Path) -> None:
    setup = make_setup(tether_home, jobs=False)
    changes = 0
    changed = anyio.Event()

    def on_message(message: IncomingMessage) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1
            changed.set()

    async with connected(setup, on_message=on_message) as client:

        async def properties() -> set[str]:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "bash")
            return set(tool.input_schema["properties"])

        assert "run_in_background" not in await properties()
        setup.plugin.set_job_registry(JobRegistry())
        with anyio.fail_after(HANG_S):
            await changed.wait()
        assert "run_in_background" in await properties()
        changed = anyio.Event()
        setup.plugin.set_job_registry(None)
        with anyio.fail_after(HANG_S):
            await changed.wait()
        assert "run_in_background" not in await properties()
        setup.plugin.set_job_registry(None)  # no change: no announcement
        assert (await client.call_tool("bash", {"command": "true", "description": "sync"})).is_error is False
    assert changes == 2


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"description": "x"}, "field 'command' is required"),
        ({"command": "true"}, "field 'description' is required"),
        ({"command": "  ", "description": "x"}, "field 'command' is blank"),
        (
            {"command": "true", "description": "x", "foo": 1},
            "unknown field 'foo' (allowed fields: command, description",
        ),
        (
            {"command": "true", "description": "x", "timeoutMs": "5"},
            "field 'timeoutMs': input should be a valid integer",
        ),
        (
            {"command": "true", "description": "x", "timeoutMs": 0},
            "field 'timeoutMs' is 0; allowed: 1 millisecond or more (a value above 600000",
        ),
        ({"command": "true", "description": "x", "timeoutMs": -5}, "field 'timeoutMs' is -5; allowed: 1"),
        (
            {"command": "true", "description": "x", "timeoutMs": 1500.5},
            "field 'timeoutMs': must be an integer (a whole number); got 1500.5",
        ),
        ({"command": "true", "description": "x", "timeoutMs": True}, "field 'timeoutMs'"),
        ({"command": 5, "description": "x"}, "field 'command': input should be a valid string"),
        (
            {"command": "true", "description": "x", "sandbox_permissions": "full-access"},
            "unknown field 'sandbox_permissions'",
        ),
        ({"command": "true", "description": "x", "run_in_background": "yes"}, "field 'run_in_background'"),
    ],
)
async def test_bad_inputs_are_clear_tool_errors(
    tether_home: Path, arguments: dict[str, object], expected: str
) -> None:
    setup = make_setup(tether_home)
    async with connected(setup) as client:
        result = await client.call_tool("bash", arguments)
        assert result.is_error
        assert text_of(result).startswith("INVALID_ARGUMENT: bash: ")
        assert expected in text_of(result)
        assert (
            text_of(await client.call_tool("bash", {"command": "echo ok", "description": "still serving"}))
            == "ok"
        )


async def test_an_unknown_field_is_answered_with_the_published_fields(tether_home: Path) -> None:
    """The list names what this deployment's schema offers: an unconfined one refuses
    ``sandbox_permissions``, a registry without jobs offers no ``run_in_background``."""
    for jobs, confining in itertools.product([True, False], repeat=2):
        setup = make_setup(tether_home, jobs=jobs, confining=confining)
        async with connected(setup) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "bash")
            result = await client.call_tool("bash", {"command": "true", "description": "x", "foo": 1})
        listed = text_of(result).partition("(allowed fields: ")[2].partition(")")[0].split(", ")
        assert result.is_error and listed == list(tool.input_schema["properties"]), (jobs, confining)


async def test_sandbox_permission_rules_when_confining(tether_home: Path) -> None:
    setup = make_setup(tether_home, confining=True)
    base = {"command": "echo ran", "description": "sandbox check"}
    async with connected(setup) as client:
        wide = await client.call_tool("bash", {**base, "sandbox_permissions": "full-access"})
        assert wide.is_error and "give a non-empty 'justification'" in text_of(wide)
        blank = await client.call_tool(
            "bash", {**base, "sandbox_permissions": "full-access", "justification": " "}
        )
        assert blank.is_error and "justification" in text_of(blank)
        bad = await client.call_tool("bash", {**base, "sandbox_permissions": "root"})
        assert bad.is_error and "allowed: read-only, workspace-write, full-access" in text_of(bad)
        for ok in (
            {
                **base,
                "sandbox_permissions": "full-access",
                "justification": "needs to write /etc for the test",
            },
            {**base, "sandbox_permissions": "workspace-write"},  # same mode: as if not given
            {**base, "sandbox_permissions": ""},  # blank: as if not given
            {**base, "sandbox_permissions": "read-only"},  # narrowing needs no reason
        ):
            result = await client.call_tool("bash", ok)
            assert not result.is_error and text_of(result) == "ran", ok


async def test_nul_bytes_are_invalid_arguments_naming_the_field(tether_home: Path, tmp_path: Path) -> None:
    # pwsh is a stand-in script here (PowerShell is not installed): the check runs before any spawn.
    stand_in = tmp_path / "pwsh"
    stand_in.write_text('#!/bin/bash\necho "pwsh ran: ${@: -1}"\n')
    stand_in.chmod(0o755)
    setup = make_setup(tether_home)
    ShellToolPlugin(
        shell="pwsh",
        executor=LocalPwshExecutor(LocalShellOptions(executable=str(stand_in), cwd=str(tether_home))),
        tools=setup.registry,
        options=ShellToolOptions(),
        grace_ms=500,
    )
    async with connected(setup) as client:
        for tool in ("bash", "pwsh"):
            for arguments, field in (
                ({"command": "echo a\x00b", "description": "nul"}, "command"),
                ({"command": "\x00", "description": "nul"}, "command"),
                ({"command": "pwd", "description": "nul", "workdir": "/tmp\x00/x"}, "workdir"),
            ):
                result = await client.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments)
                text = text_of(result)
                assert text.startswith(f"INVALID_ARGUMENT: {tool}: field {field!r} contains a NUL byte"), text
                assert "INTERNAL" not in text and "Traceback" not in text
            ok = await client.call_tool(tool, {"command": "echo fine", "description": "still serving"})
            assert not ok.is_error and "fine" in text_of(ok)
