"""``tether audit verify`` / ``show`` through the real command-line entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tether.cli as cli
import tether.cli.actions.audit as audit_action
from hang import HANG_S
from tether.audit import AuditLog


@pytest.fixture(autouse=True)
def _only_audit_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other command groups are built by other layers; this test exercises the audit group alone.
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("tether.cli.commands.audit",))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _fill(home: Path) -> Path:
    log = AuditLog(home)
    log.append(
        actor="conv-1", source="tool", tool="shell_run", action="run", targets=["dsh-aaaaaa"], command="ls"
    )
    log.append(
        actor="panel",
        source="panel",
        tool="shell",
        action="lock",
        targets=["dsh-bbbbbb"],
        command="printf '\x1b]0;pwned\x07'\nsecond line",
        reason="maintenance",
        flags=["bypass-guard"],
    )
    log.append(
        actor="cli", source="cli", tool="vault", action="set", outcome="refused", detail="group locked"
    )
    return next((home / "audit").glob("*.jsonl"))


def test_verify_exit_codes(tether_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "audit", "verify")
    assert status == 0 and "intact: 0 records" in out

    path = _fill(tether_home)
    status, out, _ = _run(capsys, "audit", "verify")
    assert status == 0 and "intact: 3 records in 1 day files" in out
    status, out, _ = _run(capsys, "audit", "verify", "--json")
    assert status == 0 and json.loads(out) == {"ok": True, "records": 3, "break": None}

    data = bytearray(path.read_bytes())
    second_line_start = data.index(b"\n") + 1
    data[second_line_start + 40] ^= 0x01
    path.write_bytes(bytes(data))
    status, out, _ = _run(capsys, "audit", "verify")
    assert status == 1
    assert f"BROKEN at {path.name} line 2" in out and "1 records before it are intact" in out
    status, out, _ = _run(capsys, "audit", "verify", "--json")
    found = json.loads(out)
    assert status == 1 and found["ok"] is False and found["records"] == 1
    assert found["break"]["file"] == path.name and found["break"]["line"] == 2
    assert found["break"]["code"] in ("NOT_JSON", "NOT_CANONICAL", "BAD_FIELD", "HASH_MISMATCH")


def test_show_prints_escaped_records_oldest_first(
    tether_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(tether_home)
    status, out, err = _run(capsys, "audit", "show")
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) == 3  # the embedded newline is escaped, never a new output line
    assert "tool:conv-1  shell_run run  dsh-aaaaaa  ok  $ ls" in lines[0]
    assert "\x1b" not in out and "\\u001b]0;pwned\\u0007'\\nsecond line" in lines[1]
    assert "reason=maintenance" in lines[1] and "flags=bypass-guard" in lines[1]
    assert "refused (group locked)" in lines[2]


def test_show_filters_and_json(tether_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fill(tether_home)
    status, out, _ = _run(capsys, "audit", "show", "--source", "panel", "--json")
    assert status == 0
    assert out.splitlines() == [path.read_text().splitlines()[1]]
    assert json.loads(out)["actor"] == "panel"

    status, out, _ = _run(capsys, "audit", "show", "--actor", "cli", "--days", "7", "--limit", "1")
    assert status == 0 and "cli:cli  vault set" in out and len(out.splitlines()) == 1

    status, out, _ = _run(capsys, "audit", "show", "--shell", "dsh-zzzzzz")
    assert status == 0 and "no audit records in the last 1 day(s) match" in out


def test_bad_flags_are_clear_errors(tether_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "audit", "show", "--days", "0")
    assert status == 2 and "INVALID_ARGUMENT: audit days must be a whole number from 1 to 3650" in err
    with pytest.raises(SystemExit) as info:
        cli.main(["audit", "show", "--source", "robot"])
    assert info.value.code == 2
    assert "invalid choice: 'robot'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["audit"])
    assert "required: SUBCOMMAND" in capsys.readouterr().err


def test_the_installed_command_exit_codes(tether_home: Path) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *argv],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            check=False,
        )

    path = _fill(tether_home)  # TETHER_HOME is exported by the fixture, so the child sees this log
    intact = run("audit", "verify")
    assert intact.returncode == 0 and "intact: 3 records" in intact.stdout, intact.stderr
    path.write_bytes(path.read_bytes().replace(b'"outcome":"refused"', b'"outcome":"ok"'))
    broken = run("audit", "verify")
    assert broken.returncode == 1 and "line 3" in broken.stdout and "hash does not match" in broken.stdout


def test_verify_says_first_that_a_large_log_takes_a_while(
    tether_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify reads and hashes every record: 23 s for 100,000 calls (43 MB) on a busy machine,
    in silence before. Past ``SLOW_BYTES`` it says so on stderr before it starts (stdout, the
    result, is unchanged); a small log gets no such line."""
    path = _fill(tether_home)
    status, out, err = _run(capsys, "audit", "verify")
    assert status == 0 and err == ""
    monkeypatch.setattr(audit_action, "SLOW_BYTES", path.stat().st_size)  # this log is "large"
    status, out, err = _run(capsys, "audit", "verify", "--json")
    assert status == 0 and json.loads(out) == {"ok": True, "records": 3, "break": None}
    assert err == "tether audit verify: reading 0 MiB of audit log in 1 day files; this takes a while\n"
