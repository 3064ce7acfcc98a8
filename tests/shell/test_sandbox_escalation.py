"""Escalation through ``sandbox_permissions`` + ``justification``: refused when blank or not granted,
effective when granted, and every request (granted or refused) in the audit log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sandbox_harness import Box, loopback_listener, make_box, run

from hang import HANG_S
from tether.errors import RefusedError, UsageError
from tether.shell import ShellExecRequest
from tether.shell.render import render_shell_result


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    return make_box(tmp_path, monkeypatch)


def _audit(box: Box) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for day in sorted((box.home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    return [r for r in records if r.get("action") == "sandbox_escalation"]


def _accept(listener: Any) -> bytes:
    listener.settimeout(20)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(20)
        return bytes(conn.recv(100))


async def test_blank_justification_is_refused_and_audited(box: Box) -> None:
    executor = box.executor(allow_escalations=("allow_network",))
    for blank in ("", "   "):
        with pytest.raises(UsageError, match="needs a non-empty justification"):
            executor.resolve(
                ShellExecRequest("true", sandbox_permissions="allow_network", justification=blank)
            )
    records = _audit(box)
    assert [r["outcome"] for r in records] == ["refused", "refused"]


async def test_a_granted_network_escalation_reaches_the_host_listener(box: Box) -> None:
    executor = box.executor(allow_escalations=("allow_network",))
    with loopback_listener() as listener:
        port = listener.getsockname()[1]
        command = f"echo hello > /dev/tcp/127.0.0.1/{port}"
        denied = await run(executor, command)
        assert denied.sandbox is not None and denied.sandbox.denied
        assert "grants it without approval" in render_shell_result(denied)
        received = asyncio.get_running_loop().run_in_executor(None, _accept, listener)
        result = await run(
            executor, command, sandbox_permissions="allow_network", justification="talk to the test listener"
        )
        assert await asyncio.wait_for(received, HANG_S) == b"hello\n"
    assert result.exit_code == 0, render_shell_result(result)
    assert result.sandbox is not None and result.sandbox.permissions == "allow_network"
    assert result.sandbox.denials == ()
    [record] = _audit(box)
    assert record["outcome"] == "ok" and record["reason"] == "talk to the test listener"
    assert record["source"] == "tool" and record["extra"]["sandbox_permissions"] == "allow_network"


async def test_a_mode_the_deployment_does_not_grant_is_refused_before_running(box: Box) -> None:
    executor = box.executor(allow_escalations=("allow_network",))
    marker = box.base / "should-not-exist"
    with pytest.raises(RefusedError, match="needs a person's approval") as refused:
        executor.resolve(
            ShellExecRequest(
                f"touch {marker}", sandbox_permissions="require_escalated", justification="please"
            )
        )
    assert "granted without approval: allow_network" in refused.value.message
    assert not marker.exists()
    [record] = _audit(box)
    assert record["outcome"] == "refused" and record["reason"] == "please"


async def test_host_write_widens_writes_but_keeps_protected_paths(box: Box) -> None:
    executor = box.executor(allow_escalations=("allow_host_write",))
    outside = box.base / "outside.txt"
    result = await run(
        executor,
        f"echo wide > {outside}; echo evil >> ~/.bashrc; touch /sys/tether-test",
        sandbox_permissions="allow_host_write",
        justification="write the build output next to the workspace",
    )
    assert outside.read_text() == "wide\n"
    assert result.sandbox is not None and result.sandbox.permissions == "allow_host_write"
    assert [(d.kind, d.target) for d in result.sandbox.denials] == [
        ("write", str(box.user / ".bashrc")),
        ("write", "/sys/tether-test"),
    ]
    assert (box.user / ".bashrc").read_text() == "original\n"


async def test_require_escalated_runs_unconfined_when_granted(box: Box) -> None:
    executor = box.executor(allow_escalations=("require_escalated",))
    result = await run(
        executor,
        'echo "$TETHER_HOME" && ls "$TETHER_HOME"',
        sandbox_permissions="require_escalated",
        justification="inspect tether's own state",
    )
    assert result.exit_code == 0, render_shell_result(result)
    assert "config.toml" in result.stdout.text  # TETHER_HOME is no longer hidden
    assert result.sandbox is not None and result.sandbox.permissions == "require_escalated"
    assert [r["extra"]["sandbox_permissions"] for r in _audit(box)] == ["require_escalated"]
