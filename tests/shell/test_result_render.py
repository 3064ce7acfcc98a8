"""ShellResultText rules: stdout, [stderr], (no output), sandbox, timeout/stop, closing marker, truncation."""

from __future__ import annotations

import pytest

from tether.shell import ShellCollectedOutput, ShellRunResult, ShellSandboxDenial, ShellSandboxInfo
from tether.shell.render import footer_lines, render_shell_result


def _result(**kw: object) -> ShellRunResult:
    base: dict[str, object] = {
        "exit_code": 0,
        "signal": None,
        "timed_out": False,
        "aborted": False,
        "timeout_ms": 120000,
        "stdout": ShellCollectedOutput(),
        "stderr": ShellCollectedOutput(),
    }
    base.update(kw)
    return ShellRunResult(**base)  # type: ignore[arg-type]


def test_stdout_only() -> None:
    assert render_shell_result(_result(stdout=ShellCollectedOutput(text="hi\n"))) == "hi"


def test_stderr_block_and_exit_code() -> None:
    result = _result(
        exit_code=2, stdout=ShellCollectedOutput(text="out\n"), stderr=ShellCollectedOutput(text="bad\n")
    )
    assert render_shell_result(result) == "out\n[stderr]\nbad\n[exit code: 2]"


def test_no_output() -> None:
    assert render_shell_result(_result()) == "(no output)"
    assert render_shell_result(_result(exit_code=1)) == "(no output)\n[exit code: 1]"


def test_timeout_and_signal() -> None:
    result = _result(exit_code=None, signal="SIGTERM", timed_out=True, timeout_ms=1000)
    assert render_shell_result(result) == "(no output)\n[timed out after 1000ms]\n[killed by signal: SIGTERM]"


def test_stopped_reason_is_rendered() -> None:
    result = _result(exit_code=None, signal="SIGKILL")
    text = render_shell_result(result, stopped="job_kill by user")
    assert text == "(no output)\n[stopped: job_kill by user]\n[killed by signal: SIGKILL]"


@pytest.mark.parametrize(
    ("spill", "marker"), [("/h/spill/1.stdout", "/h/spill/1.stdout"), (None, "(unavailable)")]
)
def test_truncation_marker_ends_its_stream(spill: str | None, marker: str) -> None:
    result = _result(
        stdout=ShellCollectedOutput(text="tail\n", truncated=True, spill_path=spill),
        stderr=ShellCollectedOutput(text="e", truncated=True, spill_path=None),
    )
    assert render_shell_result(result) == (
        f"tail\n[output truncated; full output: {marker}]\n"
        "[stderr]\ne\n[output truncated; full output: (unavailable)]"
    )


def test_sandbox_denial_and_escalation_hint_come_before_the_closing_marker() -> None:
    sandbox = ShellSandboxInfo(
        provider="bubblewrap",
        permissions="workspace-write",
        denials=(ShellSandboxDenial(kind="write", target="/etc/hosts"),),
        escalation_hint="retry with sandbox_permissions=require_escalated and a justification",
    )
    result = _result(exit_code=1, stderr=ShellCollectedOutput(text="denied\n"), sandbox=sandbox)
    assert render_shell_result(result).splitlines()[-3:] == [
        "[sandbox denied: write /etc/hosts]",
        "[sandbox: retry with sandbox_permissions=require_escalated and a justification]",
        "[exit code: 1]",
    ]
    quiet = ShellSandboxInfo(provider="bubblewrap", permissions="workspace-write")
    assert render_shell_result(_result(sandbox=quiet)) == "(no output)"


def test_footer_lines_for_streamed_output() -> None:
    result = _result(
        exit_code=3,
        timed_out=False,
        stdout=ShellCollectedOutput(text="x", truncated=True, spill_path="/s"),
    )
    assert footer_lines(result) == ["[output truncated; full output: /s]", "[exit code: 3]"]
    assert footer_lines(_result()) == []
