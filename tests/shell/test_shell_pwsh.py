"""LocalPwshExecutor: argv shape, environment, and the spec's discovery chain."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from hang import HANG_S
from tether.shell import LocalPwshExecutor, LocalShellOptions, ShellExecRequest, discover_pwsh

STAND_IN = """#!/bin/bash
# Records how it was started, like a real pwsh would be, then prints the command text.
printf '%s\\0' "$@" > "$RECORD_DIR/argv"
env > "$RECORD_DIR/env"
echo "ran: ${@: -1}"
exit 4
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "pwsh"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    return script


async def test_command_is_one_argv_element_after_noprofile_noninteractive(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tether_home: Path
) -> None:
    monkeypatch.setenv("RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("SOME_API_TOKEN", "must-not-leak")
    executor = LocalPwshExecutor(LocalShellOptions(executable=str(stand_in)))
    command = "Get-ChildItem | Select-Object -First 2; Write-Output 'a b'"
    execution = await executor.execute(executor.resolve(ShellExecRequest(command)))
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.exit_code == 4
    assert result.stdout.text == f"ran: {command}\n"
    argv = (tmp_path / "argv").read_bytes().split(b"\0")[:-1]
    assert argv == [b"-NoProfile", b"-NonInteractive", b"-Command", command.encode()]
    env = (tmp_path / "env").read_text()
    assert "must-not-leak" not in env
    assert "TETHER_SHELL=1" in env and "GIT_TERMINAL_PROMPT=0" in env


async def test_bare_pwsh_is_found_through_path(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tether_home: Path
) -> None:
    monkeypatch.setenv("RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", f"{stand_in.parent}:/usr/bin:/bin")
    executor = LocalPwshExecutor()
    spec = executor.resolve(ShellExecRequest("1+1"))
    assert spec.argv[0] == "pwsh"
    result = await asyncio.wait_for((await executor.execute(spec)).result(), HANG_S)
    assert result.stdout.text == "ran: 1+1\n"


def test_discovery_chain_on_windows_tries_the_three_locations_in_order() -> None:
    env = {
        "ProgramFiles": r"C:\Program Files",
        "PATH": r"C:\tools;C:\bin",
        "SystemRoot": r"C:\Windows",
    }
    program_files = r"C:\Program Files\PowerShell\7\pwsh.exe"
    on_path = r"C:\bin\pwsh.exe"
    legacy = r"C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe"

    def pick(*present: str) -> str:
        return discover_pwsh(None, platform="win32", environ=env, exists=lambda p: p in present)

    assert pick(program_files, on_path, legacy) == program_files
    assert pick(on_path, legacy) == on_path
    assert pick(legacy) == legacy
    assert pick() == "pwsh"
    assert discover_pwsh(r"D:\ps\pwsh.exe", platform="win32", environ=env, exists=lambda p: False) == (
        r"D:\ps\pwsh.exe"
    )


def test_discovery_elsewhere_is_explicit_path_or_bare_name() -> None:
    assert discover_pwsh(None, platform="linux", environ={"PATH": "/x"}, exists=lambda p: True) == "pwsh"
    assert discover_pwsh("/opt/pwsh", platform="linux") == "/opt/pwsh"


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="PowerShell (pwsh) is not installed on this machine")
async def test_real_pwsh(tether_home: Path) -> None:
    executor = LocalPwshExecutor()
    execution = await executor.execute(executor.resolve(ShellExecRequest("Write-Output (6*7); exit 3")))
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.stdout.text.strip() == "42" and result.exit_code == 3
