"""Spec 000 conformance points of the ``bash`` / ``pwsh`` tools found wrong (or untested) by the
fourth stop's audit, through the official MCP client where a client sees them: each test states
the rule it pins (see docs/development.md, "One-shot spec audit")."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from bash_tools_harness import connected, make_setup, text_of

from hang import HANG_S
from tether.config import load_config
from tether.shell.env_registry import ShellEnvContributor
from tether.shell.local import LocalBashExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.types import ShellExecRequest, ShellExecSpec
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext


def run(command: str, **extra: Any) -> dict[str, Any]:
    return {"command": command, "description": "spec audit", **extra}


async def test_job_kill_after_the_deadline_killed_it_does_not_claim_to_have_stopped_it(
    tether_home: Path,
) -> None:
    """TimedOut/Aborted say which cause cut the command short *first*; ``[stopped: reason]`` is an
    external kill. A ``job_kill`` in the grace period after the deadline's SIGTERM (a command that
    ignores it) answered ``stopped`` with ``killed: true``, and the result said both ``[timed out
    after 300ms]`` and ``[stopped: …]``. The deadline stopped it; job_kill was too late."""
    termed = tether_home / "termed"
    # Ignores SIGTERM, says it got one (the trap runs after the SIGTERMed `sleep` returns).
    command = f"trap 'echo TERM >> {termed}' TERM; while :; do sleep 0.1; done"
    setup = make_setup(tether_home, promote=False, grace_ms=8_000)
    async with connected(setup) as client:
        result: list[Any] = []

        async def foreground() -> None:
            result.append(await client.call_tool("bash", run(command, timeoutMs=300)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(foreground)
            with anyio.fail_after(HANG_S):
                while not await anyio.Path(termed).exists():
                    await anyio.sleep(0.02)
            jobs = (await client.call_tool("job_list", {})).structured_content
            assert jobs is not None and len(jobs["jobs"]) == 1
            late = await client.call_tool(
                "job_kill", {"jobId": jobs["jobs"][0]["jobId"], "reason": "too late"}
            )
        assert late.structured_content is not None and late.structured_content["killed"] is False
        assert "was already being stopped" in text_of(late)
        value = result[0].structured_content
        assert value is not None and value["kind"] == "foreground"
        assert (value["timedOut"], value["stopped"], value["signal"]) == (True, None, "SIGKILL")
        assert text_of(result[0]).endswith("[timed out after 300ms]\n[killed by signal: SIGKILL]")
        assert "[stopped:" not in text_of(result[0])


class _SlowPreparation(LocalBashExecutor):
    """Resolves as if preparing the command had taken one second."""

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        spec = super().resolve(request)
        return dataclasses.replace(spec, resolved_at=spec.resolved_at - 1)


async def test_a_background_job_runs_whatever_timeout_ms_it_was_given(tether_home: Path) -> None:
    """``run_in_background`` starts a job that runs until it ends or ``job_kill`` stops it (no
    deadline: OnExpiry None). Its ``timeoutMs`` still bounded the preparation, so a value shorter
    than the preparation settled the job as timed out before it ran: ``timeoutMs: 1`` gave a job
    id, then a job "killed" with no output, the command never run. timeoutMs is not the job's
    deadline, and the answer now says so."""
    setup = make_setup(tether_home)
    setup.plugin.executor = _SlowPreparation(LocalShellOptions(cwd=str(tether_home)))
    ctx = CallContext(actor="conv-bg")
    started = await setup.plugin.call(run("echo ran", run_in_background=True, timeoutMs=500), ctx)
    assert started.structured == {"kind": "background", "jobId": started.structured["jobId"]}
    assert setup.jobs is not None
    job_id = started.structured["jobId"]
    read = await setup.jobs.read_waiting(job_id, HANG_S)
    seen = read.text
    with anyio.fail_after(HANG_S):
        while read.info.status == "running":
            read = await setup.jobs.read_waiting(job_id, HANG_S)
            seen += read.text
    assert (read.info.status, read.info.exit_code, seen) == ("completed", 0, "ran\n")
    assert started.text.endswith(
        "\n[timeoutMs does not apply to a background job: it runs until it ends or job_kill stops it]"
    )
    plain = await setup.plugin.call(run("true", run_in_background=True), ctx)
    assert "timeoutMs" not in plain.text
    await setup.jobs.close()


async def test_the_schema_states_the_default_deadline_a_call_gets(tether_home: Path) -> None:
    """Resolve caps every deadline at ``MaxTimeoutMs``, the default included: with
    ``max_timeout_ms`` 400 a call without ``timeoutMs`` runs 400 ms, while ``timeoutMs``'s
    description said "default 120000, at most 400"."""
    async with connected(make_setup(tether_home, promote=False, max_timeout_ms=400)) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "bash")
        described = tool.input_schema["properties"]["timeoutMs"]["description"]
        assert described.startswith("Foreground deadline in milliseconds (default 400, at most 400")
        timed = await client.call_tool("bash", run("sleep 30"))
        assert timed.structured_content is not None
        assert (timed.structured_content["timedOut"], timed.structured_content["timeoutMs"]) == (True, 400)


async def test_tether_home_in_a_command_is_the_home_of_its_configuration(
    tether_home: Path, tmp_path: Path
) -> None:
    """shell-env built-in ``TETHER_HOME``: the home the tools were built for. A library caller's
    ``build_catalog(load_config(home))`` ran commands with ``$TETHER_HOME`` of its environment
    instead (while their spill files went to ``home``), unlike the sandbox and ``tether exec``."""
    other = tmp_path / "other-home"
    other.mkdir()
    catalog = build_catalog(load_config(other))
    try:
        bash = catalog.registry.get("bash")
        assert bash is not None
        result = await bash.handler(run('echo "$TETHER_HOME $TETHER_SHELL"'), CallContext(actor="conv-home"))
        assert result.text == f"{other} 1"
    finally:
        await catalog.aclose()


STAND_IN = """#!/bin/sh
# Stands in for PowerShell, which cannot be installed here: prints how it was started.
for arg in "$@"; do printf '<%s>' "$arg"; done
echo
exit 3
"""


@pytest.mark.parametrize("where", ["path", "explicit"])
async def test_pwsh_tool_comes_and_goes_with_the_discovery_chain(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Spec: "都没有则回退到裸名字 pwsh，交给子进程 seam 的 PATH 搜索", and "配置里给了显式路径就用它":
    the ``pwsh`` tool is listed when either resolves (a stand-in executable here), runs
    ``pwsh -NoProfile -NonInteractive -Command COMMAND`` with the command as one argument, and
    is absent when nothing resolves."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    catalog = build_catalog(load_config(tether_home))
    try:
        assert catalog.registry.get("pwsh") is None and "tool:pwsh" not in catalog.hints
    finally:
        await catalog.aclose()
    stand_in = bindir / ("pwsh" if where == "path" else "my-powershell")
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    if where == "path":
        monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    else:
        (tether_home / "config.toml").write_text(
            f'[shell]\nprovider = "pwsh"\nexecutable = "{stand_in}"\n', encoding="utf-8"
        )
    catalog = build_catalog(load_config(tether_home))
    try:
        pwsh = catalog.registry.get("pwsh")
        assert pwsh is not None and "tool:pwsh" in catalog.hints
        assert set(pwsh.input_schema["required"]) == {"command", "description"}
        result = await pwsh.handler(run("Write-Output 'a b'; 1+1"), CallContext(actor="conv-pwsh"))
        assert (
            result.text == "<-NoProfile><-NonInteractive><-Command><Write-Output 'a b'; 1+1>\n[exit code: 3]"
        )
        bash = catalog.registry.get("bash")
        assert bash is not None
        # The bash tool stays bash whichever provider the configuration names.
        assert (await bash.handler(run("echo $0"), CallContext(actor="conv-pwsh"))).text == "bash"
    finally:
        await catalog.aclose()


async def test_a_background_command_that_cannot_start_is_shell_spawn_not_a_job(tether_home: Path) -> None:
    """ "SHELL_SPAWN 走 Killed 句柄，ResultAsync() 才抛": a foreground call that cannot start is the
    SHELL_SPAWN error. With ``run_in_background`` the answer was "started background job …" for a
    process that never existed; the job then read "killed" with the reason in its output."""
    too_long = "echo " + "x" * 200_000  # over the 128 KiB one argument may hold
    setup = make_setup(tether_home)
    async with connected(setup) as client:
        refused = await client.call_tool("bash", run(too_long, run_in_background=True))
        assert refused.is_error, text_of(refused)
        assert text_of(refused).startswith("SHELL_SPAWN: cannot start 'bash': an argument of it")
        listed = (await client.call_tool("job_list", {})).structured_content
        assert listed is not None and listed["jobs"] == []
        started = await client.call_tool("bash", run("echo fine", run_in_background=True))
        assert started.structured_content is not None and started.structured_content["kind"] == "background"


async def test_one_shell_env_registry_serves_both_tools(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "shell-env catalog 行提供 IShellEnvRegistry": one registry per catalog, whose contributors
    reach every shell execution. Each tool built its own registry, reachable only through its
    executor, so a plugin had nothing to register with (and would have had to find both)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stand_in = bindir / "pwsh"
    stand_in.write_text('#!/bin/sh\necho "pwsh sees $TETHER_BUILD_ID"\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    catalog = build_catalog(load_config(tether_home))
    try:
        catalog.env_registry.register(
            ShellEnvContributor(
                name="builds",
                variables={"TETHER_BUILD_ID": "the build this conversation works on"},
                resolve=lambda context: {"TETHER_BUILD_ID": f"b-{context.session_id}"},
            )
        )
        ctx = CallContext(actor="conv-env")
        bash, pwsh = catalog.registry.get("bash"), catalog.registry.get("pwsh")
        assert bash is not None and pwsh is not None
        assert (await bash.handler(run("echo $TETHER_BUILD_ID"), ctx)).text == "b-conv-env"
        assert (await pwsh.handler(run("x"), ctx)).text == "pwsh sees b-conv-env"
    finally:
        await catalog.aclose()
