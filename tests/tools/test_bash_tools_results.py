"""Each result shape and each render rule of the bash tool, through the official SDK client."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from bash_tools_harness import ESCALATION_HINT, connected, make_setup, text_of

from hang import HANG_MS
from tether.shell.local import LocalBashExecutor
from tether.shell.options import LocalShellOptions
from tether.shell.types import ShellExecRequest, ShellExecSpec
from tether.tools.bash.results import DISABLED_TEXT, UNAVAILABLE_TEXT
from tether.tools.registry import CallContext


def run(command: str, **extra: Any) -> dict[str, Any]:
    return {"command": command, "description": "test command", **extra}


async def test_timeout_above_the_maximum_is_clamped_and_reported(tether_home: Path) -> None:
    # Spec 000: Resolve caps per-call overrides; timeoutMs in the result is the deadline that applied.
    async with connected(make_setup(tether_home, promote=False, max_timeout_ms=400)) as client:
        result = await client.call_tool("bash", run("echo started; sleep 30", timeoutMs=900_000))
        assert not result.is_error, text_of(result)
        # (The output is what arrived by the deadline: "started", or nothing on a very busy machine.)
        assert text_of(result).replace("(no output)\n", "started\n") == (
            "[timeoutMs 900000 clamped to 400, the maximum ([shell].max_timeout_ms)]\n"
            "started\n[timed out after 400ms]\n[killed by signal: SIGTERM]"
        )
        value = result.structured_content
        assert value is not None and value["kind"] == "foreground"
        assert (value["timeoutMs"], value["requestedTimeoutMs"], value["timedOut"]) == (400, 900_000, True)
        # At or under the maximum nothing is said; an integral float is an integer.
        quick = await client.call_tool("bash", run("echo quick", timeoutMs=400.0))
        assert text_of(quick) == "quick"
        assert quick.structured_content is not None and "requestedTimeoutMs" not in quick.structured_content
        assert quick.structured_content["timeoutMs"] == 400
    async with connected(make_setup(tether_home, max_timeout_ms=300)) as client:
        promoted = await client.call_tool("bash", run("echo early; sleep 30", timeoutMs=5_000))
        value = promoted.structured_content
        assert value is not None and value["kind"] == "promoted", text_of(promoted)
        assert (value["timeoutMs"], value["requestedTimeoutMs"]) == (300, 5_000)
        assert text_of(promoted).startswith(
            "[timeoutMs 5000 clamped to 300, the maximum ([shell].max_timeout_ms)]\n"
        )
        assert text_of(promoted).endswith(
            f"[still running after 300ms; moved to background job {value['jobId']}]"
        )
        killed = await client.call_tool("job_kill", {"jobId": value["jobId"]})
        assert not killed.is_error


async def test_foreground_render_rules(tether_home: Path) -> None:
    async with connected(make_setup(tether_home, promote=False)) as client:
        cases = [
            ("echo out", "out"),
            ("echo out; echo err >&2", "out\n[stderr]\nerr"),
            ("echo err >&2", "[stderr]\nerr"),
            ("true", "(no output)"),
            ("echo partial; exit 3", "partial\n[exit code: 3]"),
            ("exit 4", "(no output)\n[exit code: 4]"),
            ("echo bye; kill -KILL $$", "bye\n[killed by signal: SIGKILL]"),
        ]
        for command, expected in cases:
            result = await client.call_tool("bash", run(command))
            assert not result.is_error, command  # non-zero exits stay in-band
            assert text_of(result) == expected, command
            structured = result.structured_content
            assert structured is not None and structured["kind"] == "foreground"
            # The rendered text is the text content only: structured clients read no second copy.
            assert "rendered" not in structured
            for stream in ("stdout", "stderr"):
                assert structured[stream]["text"].rstrip("\n") in text_of(result)

        exited = (await client.call_tool("bash", run("exit 3"))).structured_content
        assert exited is not None
        assert (exited["exitCode"], exited["signal"], exited["timedOut"], exited["aborted"]) == (
            3,
            None,
            False,
            False,
        )
        assert exited["stopped"] is None and exited["timeoutMs"] == 120_000 and "sandbox" not in exited

        timed = await client.call_tool("bash", run("echo started; sleep 30", timeoutMs=300))
        # The output is what arrived by the deadline: "started", unless a busy machine had not even
        # run the echo within 300 ms. Either way it comes first, then the timeout marker.
        assert text_of(timed).split("\n")[:2] in (
            ["started", "[timed out after 300ms]"],
            ["(no output)", "[timed out after 300ms]"],
        )
        assert timed.structured_content is not None and timed.structured_content["timedOut"] is True

        workdir = await client.call_tool("bash", run("pwd", workdir="spill"))
        assert text_of(workdir) == str(tether_home / "spill")
        missing = await client.call_tool("bash", run("pwd", workdir="no/such/dir"))
        assert missing.is_error and text_of(missing).startswith("SHELL_BAD_CWD: ")


async def test_truncation_markers(tether_home: Path) -> None:
    async with connected(make_setup(tether_home, max_output_bytes=100)) as client:
        result = await client.call_tool("bash", run("seq 1 1000"))
        text = text_of(result)
        structured = result.structured_content
        assert structured is not None and structured["stdout"]["truncated"] is True
        spill = structured["stdout"]["spillPath"]
        assert text.endswith(f"\n1000\n[output truncated; full output: {spill}]")
        assert await anyio.Path(spill).read_text() == "".join(f"{i}\n" for i in range(1, 1001))

        both = await client.call_tool("bash", run("seq 1 1000 >&2"))
        assert text_of(both).startswith("[stderr]\n") and "[output truncated; full output: " in text_of(both)

    async with connected(make_setup(tether_home, max_output_bytes=100, max_spill_bytes=1000)) as client:
        result = await client.call_tool("bash", run("seq 1 1000"))
        assert text_of(result).endswith("\n1000\n[output truncated; full output: (unavailable)]")


async def test_sandbox_deny_marker_and_hint(tether_home: Path) -> None:
    async with connected(make_setup(tether_home, confining=True)) as client:
        denied = await client.call_tool("bash", run("echo 'DENY /etc/passwd' >&2; exit 1"))
        assert text_of(denied) == (
            f"[stderr]\nDENY /etc/passwd\n[sandbox denied: write /etc/passwd]\n[sandbox: {ESCALATION_HINT}]"
            "\n[exit code: 1]"
        )
        structured = denied.structured_content
        assert structured is not None and structured["sandbox"]["denied"] is True
        assert structured["sandbox"]["denials"] == [{"kind": "write", "target": "/etc/passwd", "detail": ""}]
        fine = await client.call_tool("bash", run("echo fine"))
        assert text_of(fine) == "fine"
        assert fine.structured_content is not None and fine.structured_content["sandbox"]["denied"] is False


async def test_background_shape_and_fixed_texts(tether_home: Path) -> None:
    async with connected(make_setup(tether_home)) as client:
        started = await client.call_tool("bash", run("echo from the background", run_in_background=True))
        structured = started.structured_content
        assert (
            structured is not None
            and set(structured) == {"kind", "jobId"}
            and structured["kind"] == "background"
        )
        job_id = structured["jobId"]
        assert job_id in text_of(started)
        output = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
        assert text_of(output).startswith("from the background\n")

    async with connected(make_setup(tether_home, background=False)) as client:
        refused = await client.call_tool("bash", run("true", run_in_background=True))
        assert refused.is_error and text_of(refused) == DISABLED_TEXT
    async with connected(make_setup(tether_home, jobs=False)) as client:
        refused = await client.call_tool("bash", run("true", run_in_background=True))
        assert refused.is_error and text_of(refused) == UNAVAILABLE_TEXT


@pytest.mark.parametrize("background", [True, False])
async def test_promoted_shape(tether_home: Path, background: bool) -> None:
    async with connected(make_setup(tether_home, background=background)) as client:
        result = await client.call_tool("bash", run("echo early; sleep 30", timeoutMs=300))
        structured = result.structured_content
        assert structured is not None and structured["kind"] == "promoted"
        job_id = structured["jobId"]
        assert set(structured) == {"kind", "jobId", "timeoutMs", "output"}
        # The seed is what the command printed by the deadline ("early", unless a busy machine had
        # not run the echo yet); the rest follows in job_output, so "early" is seen exactly once.
        assert structured["output"] in ("early\n", "") and structured["timeoutMs"] == 300
        marker = f"[still running after 300ms; moved to background job {job_id}]"
        assert text_of(result) == structured["output"] + marker
        if not structured["output"]:
            rest = await client.call_tool("job_output", {"jobId": job_id, "timeoutMs": HANG_MS})
            assert text_of(rest).startswith("early\n"), text_of(rest)
        listed = await client.call_tool("job_list", {})
        assert listed.structured_content is not None
        assert [job["jobId"] for job in listed.structured_content["jobs"]] == [job_id]


class _SlowPreparation(LocalBashExecutor):
    """Resolves as if preparing the command had already used up its whole deadline."""

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        spec = super().resolve(request)
        return dataclasses.replace(spec, resolved_at=spec.resolved_at - spec.timeout_ms / 1000 - 1)


async def test_preparation_timeout_gives_the_empty_timed_out_result(tether_home: Path) -> None:
    setup = make_setup(tether_home)
    setup.plugin.executor = _SlowPreparation(LocalShellOptions(cwd=str(tether_home)))
    result = await setup.plugin.call(run("echo never", timeoutMs=500), CallContext(actor="conv-prep"))
    assert result.text == "(no output)\n[timed out after 500ms]"
    assert result.structured["kind"] == "foreground" and result.structured["timedOut"] is True
    assert setup.jobs is not None and setup.jobs.list() == []
