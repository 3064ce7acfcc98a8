"""The confinement seam: a provider wraps argv at execute time and reports denials once settled.

The confinement here is a minimal real one (it runs the command through ``env`` with a marker
variable and parses a denial line from stderr), standing in for bubblewrap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from hang import HANG_S
from tether.shell import (
    ConfinedLaunch,
    LocalBashExecutor,
    ShellConfinement,
    ShellExecRequest,
    ShellExecSpec,
    ShellSandboxDenial,
    ShellSandboxInfo,
)
from tether.shell.render import render_shell_result


class EnvWrapConfinement(ShellConfinement):
    name = "env-wrap"

    def __init__(self) -> None:
        self.cleaned = 0

    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch:
        async def report(stderr_tail: str) -> ShellSandboxInfo:
            denials = tuple(
                ShellSandboxDenial(kind="write", target=line.split(":", 1)[1].strip())
                for line in stderr_tail.splitlines()
                if line.startswith("DENIED:")
            )
            return ShellSandboxInfo(
                provider=self.name,
                permissions="read-only",
                denials=denials,
                escalation_hint="ask for write access",
            )

        def cleanup() -> None:
            self.cleaned += 1

        return ConfinedLaunch(
            argv=("env", "CONFINED=yes", *argv),
            env={"CONFINED_BY": self.name},
            report=report,
            cleanup=cleanup,
        )


async def test_wrapped_argv_runs_and_the_report_lands_on_handle_and_result(tether_home: Path) -> None:
    confinement = EnvWrapConfinement()
    executor = LocalBashExecutor(confinement=confinement)
    assert executor.confining
    spec = executor.resolve(
        ShellExecRequest('echo "$CONFINED $CONFINED_BY"; echo "DENIED: /etc/x" >&2; exit 1')
    )
    assert spec.argv[0] == "bash"  # the spec stays provider-shaped; wrapping happens at execute
    execution = await executor.execute(spec)
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.stdout.text == "yes env-wrap\n"
    assert execution.sandbox is not None and execution.sandbox.denied
    assert result.sandbox == execution.sandbox
    assert result.sandbox.denials == (ShellSandboxDenial(kind="write", target="/etc/x"),)
    assert "[sandbox denied: write /etc/x]" in render_shell_result(result)
    assert confinement.cleaned == 1


def test_local_executor_is_not_confining() -> None:
    assert not LocalBashExecutor().confining


class BrokenReportConfinement(ShellConfinement):
    """A confinement whose verdict raises: the result must still arrive, and cleanup still run."""

    name = "broken-report"

    def __init__(self) -> None:
        self.cleaned = 0

    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch:
        async def report(stderr_tail: str) -> ShellSandboxInfo:
            raise PermissionError(13, "Permission denied", "/proc/1/root")

        def cleanup() -> None:
            self.cleaned += 1

        return ConfinedLaunch(argv=tuple(argv), report=report, cleanup=cleanup)


async def test_a_failing_report_never_holds_the_result_back(tether_home: Path) -> None:
    confinement = BrokenReportConfinement()
    executor = LocalBashExecutor(confinement=confinement)
    execution = await executor.execute(executor.resolve(ShellExecRequest(command="echo done")))
    result = await asyncio.wait_for(execution.result(), 30)
    assert result.exit_code == 0 and result.stdout.text == "done\n"
    assert result.sandbox is None and confinement.cleaned == 1
