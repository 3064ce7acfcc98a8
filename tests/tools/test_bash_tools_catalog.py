"""The per-process tool catalog assembled from config.toml, and the pwsh tool where pwsh exists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tether.config import load_config
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext


async def test_default_catalog(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home))
    try:
        names = [tool.name for tool in catalog.registry.list()]
        expected = ["bash", *(["pwsh"] if shutil.which("pwsh") else []), "job_list", "job_output", "job_kill"]
        assert names[: len(expected)] == expected  # the persistent-shell tools follow
        bash = catalog.registry.get("bash")
        assert bash is not None and "run_in_background" in bash.input_schema["properties"]
        assert "moves to a background job" in bash.input_schema["properties"]["timeoutMs"]["description"]
        assert catalog.jobs is not None and catalog.jobs.max_live == 16
        instructions = catalog.instructions()
        assert "## tool:bash" in instructions and catalog.hints["tool:bash"] in instructions
        assert catalog.hints["tool:bash"] in bash.description
    finally:
        await catalog.aclose()


async def test_config_switches_the_schema_and_bounds(tether_home: Path) -> None:
    (tether_home / "config.toml").write_text(
        "[tools]\nenable_run_in_background = false\npromote_on_timeout = false\n"
        "[jobs]\nmax_live = 2\n[shell]\nmax_timeout_ms = 5000\n"
    )
    catalog = build_catalog(load_config(tether_home))
    try:
        bash = catalog.registry.get("bash")
        assert bash is not None
        properties = bash.input_schema["properties"]
        assert "run_in_background" not in properties
        # A larger value is clamped, not refused, so the schema states the cap but does not enforce it.
        assert "maximum" not in properties["timeoutMs"]
        assert "at most 5000: a larger value is clamped to it" in properties["timeoutMs"]["description"]
        assert "it is killed" in properties["timeoutMs"]["description"]
        assert catalog.jobs is not None and catalog.jobs.max_live == 2
    finally:
        await catalog.aclose()


async def test_closing_the_catalog_kills_its_jobs(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home))
    bash = catalog.registry.get("bash")
    assert bash is not None and catalog.jobs is not None
    ctx = CallContext(actor="conv-close")
    started = await bash.handler({"command": "sleep 30", "description": "bg", "run_in_background": True}, ctx)
    job = catalog.jobs.get(started.structured["jobId"])
    await catalog.aclose()
    assert job.info().status == "killed" and job.info().stopped == "tether is shutting down"


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="PowerShell (pwsh) is not installed on this machine")
async def test_pwsh_tool_runs_a_command(tether_home: Path) -> None:
    catalog = build_catalog(load_config(tether_home))
    try:
        pwsh = catalog.registry.get("pwsh")
        assert pwsh is not None and "tool:pwsh" in catalog.hints
        result = await pwsh.handler(
            {"command": "Write-Output 'hi'; exit 3", "description": "greet"}, CallContext(actor="conv-pwsh")
        )
        assert result.text == "hi\n[exit code: 3]"
    finally:
        await catalog.aclose()
