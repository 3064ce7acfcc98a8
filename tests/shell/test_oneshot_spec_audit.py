"""Spec 000 conformance points of the executor seam found wrong by the fourth stop's audit: each
test states the rule it pins (see docs/development.md, "One-shot spec audit")."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from hang import HANG_S
from tether.shell import (
    ConfinedLaunch,
    LocalBashExecutor,
    LocalShellOptions,
    ShellConfinement,
    ShellExecRequest,
    ShellExecSpec,
    ShellExpiryPolicy,
    ShellProcessStatus,
)


class _SlowWrap(ShellConfinement):
    """A confinement whose preparation outlasts the command's deadline (as the sandbox's snapshot
    of the repositories can in a large tree); it counts the launches it cleaned up."""

    name = "slow-wrap"

    def __init__(self) -> None:
        self.cleaned = 0

    async def wrap(self, argv: Sequence[str], spec: ShellExecSpec) -> ConfinedLaunch:
        deadline = spec.resolved_at + spec.timeout_ms / 1000
        while time.monotonic() <= deadline:
            await asyncio.sleep(0.01)

        def cleanup() -> None:
            self.cleaned += 1

        return ConfinedLaunch(argv=tuple(argv), cleanup=cleanup)


@pytest.mark.parametrize("policy", [ShellExpiryPolicy.NONE, ShellExpiryPolicy.KILL])
async def test_a_deadline_that_passes_while_the_confinement_wraps_settles_without_spawning(
    tmp_path: Path, policy: ShellExpiryPolicy
) -> None:
    """Spec: "准备阶段（resolve→spawn 之间）到期则直接 settle 成 timed-out 的句柄". Wrapping the argv is
    part of preparing. The deadline was checked only before the wrap, so a wrap that outlasted it
    spawned the command anyway — with ``NONE`` a live handle that runs on past its deadline."""
    marker = tmp_path / "ran"
    confinement = _SlowWrap()
    executor = LocalBashExecutor(LocalShellOptions(cwd=str(tmp_path)), confinement=confinement)
    spec = executor.resolve(ShellExecRequest(f"touch {marker}", timeout_ms=50, on_expiry=policy))
    execution = await executor.execute(spec)
    assert execution.status is ShellProcessStatus.KILLED and execution.pid is None
    assert execution.done.is_set()
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.timed_out and result.exit_code is None and result.signal is None
    assert (result.stdout.text, result.stderr.text) == ("", "")
    assert confinement.cleaned == 1  # what the wrap created is undone
    assert not marker.exists()


async def test_a_settled_handles_result_is_memoized(tmp_path: Path) -> None:
    """Spec: "ResultAsync() memoized". The same result object every time, also from a handle that
    never had a process (it built a new one per call)."""
    executor = LocalBashExecutor(LocalShellOptions(cwd=str(tmp_path)))
    spec = executor.resolve(ShellExecRequest("true", timeout_ms=20))
    # Resolved as if preparing had already used up the whole deadline.
    execution = await executor.execute(dataclasses.replace(spec, resolved_at=spec.resolved_at - 1))
    assert execution.pid is None
    first = await execution.result()
    assert first.timed_out
    assert await execution.result() is first


def test_the_configured_default_directory_is_expanded_and_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LocalShellOptions ``Cwd`` is the default working directory resolve fills in. Written as a
    person writes it in config.toml, ``cwd = "~/proj"`` was used verbatim: every command failed
    with ``SHELL_BAD_CWD: working directory '~/proj' does not exist`` (a ``workdir`` of ``~/x``
    was expanded, the default was not); a relative one stayed relative in the spec."""
    (tmp_path / "proj" / "sub").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for configured in ("~/proj", "proj", "./proj/../proj"):
        executor = LocalBashExecutor(LocalShellOptions(cwd=configured))
        assert executor.resolve(ShellExecRequest("pwd")).cwd == str(tmp_path / "proj"), configured
        assert executor.resolve(ShellExecRequest("pwd", workdir="sub")).cwd == str(tmp_path / "proj" / "sub")
        assert executor.resolve(ShellExecRequest("pwd", workdir="/etc")).cwd == "/etc"
