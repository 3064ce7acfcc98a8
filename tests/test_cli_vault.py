"""``tether vault …`` through a real ``python -m tether`` process, values and passphrases on stdin."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from tether.store.db import Store
from tether.store.vault import Vault

CANARY = "cli-canary-Q8v!z#0"
PASSPHRASE = "tidy lemon forty"


def _tether(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "tether", "vault", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def _refused(done: subprocess.CompletedProcess[str], code: str, fragment: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"tether: {code}: ") and fragment in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def _audit_records(home: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted((home / "audit").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_set_list_rm_with_the_value_on_stdin(tether_home: Path) -> None:
    assert "stored API_TOKEN in group default" in _ok(
        _tether(tether_home, "set", "API_TOKEN", stdin=CANARY + "\n")
    )
    _ok(_tether(tether_home, "set", "MULTI", "--group", "ops", stdin="line one\nline two\n"))
    vault = Vault(Store.open(tether_home), tether_home)
    assert vault.resolve("API_TOKEN") == CANARY, "one trailing newline is not part of the value"
    assert vault.resolve("MULTI") == "line one\nline two"
    listing = _ok(_tether(tether_home, "list"))
    assert "API_TOKEN" in listing and "MULTI" in listing and "ops" in listing and CANARY not in listing
    data = json.loads(_ok(_tether(tether_home, "list", "--json")))
    assert [(i["name"], i["group"], i["locked"]) for i in data["items"]] == [
        ("API_TOKEN", "default", False),
        ("MULTI", "ops", False),
    ]
    assert "removed API_TOKEN" in _ok(_tether(tether_home, "rm", "API_TOKEN"))
    _refused(_tether(tether_home, "rm", "API_TOKEN"), "NOT_FOUND", "no vault secret named 'API_TOKEN'")
    _refused(_tether(tether_home, "set", "EMPTY", stdin=""), "INVALID_ARGUMENT", "empty")


def test_a_value_is_never_accepted_as_an_argument(tether_home: Path) -> None:
    done = _tether(tether_home, "set", "NAME", CANARY)
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr
    assert (
        not (tether_home / "tether.db").exists()
        or CANARY.encode() not in (tether_home / "tether.db").read_bytes()
    )


def test_passphrase_group_unlock_lock_and_wrong_passphrase(tether_home: Path) -> None:
    assert "passphrase group" in _ok(_tether(tether_home, "group", "create", "prod", stdin=PASSPHRASE + "\n"))
    _refused(
        _tether(tether_home, "set", "DB", "--group", "prod", stdin=CANARY),
        "REFUSED",
        "tether vault unlock prod",
    )
    _refused(_tether(tether_home, "unlock", "prod", stdin="wrong\n"), "REFUSED", "wrong passphrase")
    _refused(
        _tether(tether_home, "unlock", "prod", "--minutes", "0", stdin=PASSPHRASE),
        "INVALID_ARGUMENT",
        "--minutes",
    )
    out = _ok(_tether(tether_home, "unlock", "prod", "--minutes", "3", stdin=PASSPHRASE + "\n"))
    assert "unlocked until" in out and "tether vault lock prod" in out
    _ok(_tether(tether_home, "set", "DB", "--group", "prod", stdin=CANARY))
    assert Vault(Store.open(tether_home), tether_home).resolve("DB") == CANARY
    assert "unlocked until" in _ok(_tether(tether_home, "list"))
    assert "group prod locked" in _ok(_tether(tether_home, "lock", "prod"))
    data = json.loads(_ok(_tether(tether_home, "list", "--json")))
    assert data["groups"] == [
        {"name": "prod", "protected": True, "locked": True, "unlocked_until_ms": None, "items": 1},
    ]
    _refused(_tether(tether_home, "group", "rm", "prod"), "REFUSED", "still holds 1 secret")
    _refused(_tether(tether_home, "lock", "nope"), "NOT_FOUND", "vault group 'nope' does not exist")


def test_cli_actions_are_audited_by_name_and_nothing_holds_the_canary(tether_home: Path) -> None:
    _ok(_tether(tether_home, "group", "create", "prod", stdin=PASSPHRASE + "\n"))
    _ok(_tether(tether_home, "unlock", "prod", stdin=PASSPHRASE + "\n"))
    _ok(_tether(tether_home, "set", "DB", "--group", "prod", stdin=CANARY))
    _refused(_tether(tether_home, "unlock", "prod", stdin="wrong\n"), "REFUSED", "wrong passphrase")
    _ok(_tether(tether_home, "lock", "prod"))
    _ok(_tether(tether_home, "group", "create", "plain", "--no-passphrase"))
    _ok(_tether(tether_home, "list"))
    records = _audit_records(tether_home)
    assert [(r["action"], r["targets"], r["outcome"]) for r in records] == [
        ("group-create", ["prod"], "ok"),
        ("unlock", ["prod"], "ok"),
        ("set", ["DB", "prod"], "ok"),
        ("unlock", ["prod"], "refused"),
        ("lock", ["prod"], "ok"),
        ("group-create", ["plain"], "ok"),
        ("list", [], "ok"),
    ]
    assert all(r["source"] == "cli" and r["actor"] == "cli" and r["tool"] == "vault" for r in records)
    for path in tether_home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert CANARY.encode() not in data and PASSPHRASE.encode() not in data, path


def _on_a_terminal(home: Path, args: list[str], answers: list[str]) -> tuple[int, str]:
    """Run ``tether vault ARGS`` on a new pseudo-terminal, answering each ``…: `` prompt in turn."""
    env = {**os.environ, "TETHER_HOME": str(home)}
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal, as in a person's shell
        os.execve(sys.executable, [sys.executable, "-m", "tether", "vault", *args], env)
    transcript = b""
    deadline = time.monotonic() + 30

    def read_some() -> bool:
        nonlocal transcript
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no output before the deadline: {transcript!r}"
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        transcript += data
        return bool(data)

    try:
        for answer in answers:
            seen = len(transcript)
            while not transcript[seen:].rstrip().endswith(b":"):
                assert read_some(), transcript
            os.write(fd, answer.encode() + b"\n")
        while read_some():
            pass
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), transcript.decode("utf-8", "replace")


def test_prompts_on_a_terminal_do_not_echo(tether_home: Path) -> None:
    status, transcript = _on_a_terminal(tether_home, ["group", "create", "prod"], [PASSPHRASE, "different"])
    assert status == 2 and "the two passphrases differ" in transcript and PASSPHRASE not in transcript
    status, transcript = _on_a_terminal(tether_home, ["group", "create", "prod"], [PASSPHRASE, PASSPHRASE])
    assert status == 0 and "created passphrase group" in transcript and PASSPHRASE not in transcript
    # Storing into the locked group asks for the value, then for the group's passphrase.
    status, transcript = _on_a_terminal(tether_home, ["set", "DB", "--group", "prod"], [CANARY, PASSPHRASE])
    assert status == 0, transcript
    assert "value for DB (not echoed):" in transcript and "is locked; its passphrase:" in transcript
    assert CANARY not in transcript and PASSPHRASE not in transcript
    status, transcript = _on_a_terminal(tether_home, ["unlock", "prod", "--minutes", "2"], [PASSPHRASE])
    assert status == 0 and "unlocked until" in transcript and PASSPHRASE not in transcript
    assert Vault(Store.open(tether_home), tether_home).resolve("DB") == CANARY
