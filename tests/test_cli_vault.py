"""``tether vault …``: values and passphrases on stdin or a terminal, never as arguments.

Most cases call ``tether.cli.main`` in-process (it asks the home's tools process, started by the
first); a real ``python -m tether`` process proves the stdin path, and a pseudo-terminal proves the
prompts.
"""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hang import HANG_S
from tether.cli import main
from tether.store.db import Store
from tether.store.vault import Vault

CANARY = "cli-canary-Q8v!z#0"
PASSPHRASE = "tidy lemon forty"


@pytest.fixture(autouse=True)
def _close_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``Store`` a test opens is closed at teardown: no connection outlives its test."""
    opened: list[Store] = []
    real_open = Store.open.__func__  # type: ignore[attr-defined]

    def tracked(cls: type[Store], home: Path) -> Store:
        store: Store = real_open(cls, home)
        opened.append(store)
        return store

    monkeypatch.setattr(Store, "open", classmethod(tracked))
    yield
    for store in opened:
        store.close()


def _tether(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "tether", "vault", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def cli(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Cli]:
    """``tether vault ARGS`` in this process, with ``stdin`` as a non-terminal stdin."""

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        try:
            status = main(["vault", *args])
        except SystemExit as exc:  # argparse rejects the command line
            status = int(exc.code or 0)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), status, out, err)

    yield run


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


def test_set_list_rm_with_the_value_on_stdin(tether_home: Path, cli: Cli) -> None:
    assert "stored API_TOKEN in group default" in _ok(cli("set", "API_TOKEN", stdin=CANARY + "\n"))
    _ok(cli("set", "MULTI", "--group", "ops", stdin="line one\nline two\n"))
    vault = Vault(Store.open(tether_home), tether_home)
    assert vault.resolve("API_TOKEN") == CANARY, "one trailing newline is not part of the value"
    assert vault.resolve("MULTI") == "line one\nline two"
    listing = _ok(cli("list"))
    assert "API_TOKEN" in listing and "MULTI" in listing and "ops" in listing and CANARY not in listing
    data = json.loads(_ok(cli("list", "--json")))
    assert [(i["name"], i["group"], i["locked"]) for i in data["items"]] == [
        ("API_TOKEN", "default", False),
        ("MULTI", "ops", False),
    ]
    assert "removed API_TOKEN" in _ok(cli("rm", "API_TOKEN"))
    _refused(cli("rm", "API_TOKEN"), "NOT_FOUND", "no vault secret named 'API_TOKEN'")
    _refused(cli("set", "EMPTY", stdin=""), "INVALID_ARGUMENT", "empty")


def test_python_m_tether_vault_reads_stdin_and_refuses_a_value_argument(tether_home: Path) -> None:
    done = _tether(tether_home, "set", "NAME", CANARY)
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr
    assert "stored API_TOKEN" in _ok(_tether(tether_home, "set", "API_TOKEN", stdin=CANARY + "\n"))
    assert Vault(Store.open(tether_home), tether_home).resolve("API_TOKEN") == CANARY
    data = json.loads(_ok(_tether(tether_home, "list", "--json")))
    assert [i["name"] for i in data["items"]] == ["API_TOKEN"] and CANARY not in json.dumps(data)
    Vault(Store.open(tether_home), tether_home).create_group("prod", PASSPHRASE)
    _refused(_tether(tether_home, "unlock", "prod", stdin="wrong\n"), "REFUSED", "wrong passphrase")
    assert [r["action"] for r in _audit_records(tether_home)] == ["set", "list", "unlock"]
    assert all(CANARY.encode() not in p.read_bytes() for p in tether_home.rglob("*") if p.is_file())


def test_passphrase_group_unlock_lock_and_wrong_passphrase(tether_home: Path, cli: Cli) -> None:
    assert "passphrase group" in _ok(cli("group", "create", "prod", stdin=PASSPHRASE + "\n"))
    _refused(
        cli("set", "DB", "--group", "prod", stdin=CANARY),
        "REFUSED",
        "tether vault unlock prod",
    )
    _refused(cli("unlock", "prod", stdin="wrong\n"), "REFUSED", "wrong passphrase")
    _refused(
        cli("unlock", "prod", "--minutes", "0", stdin=PASSPHRASE),
        "INVALID_ARGUMENT",
        "--minutes",
    )
    out = _ok(cli("unlock", "prod", "--minutes", "3", stdin=PASSPHRASE + "\n"))
    assert "unlocked until" in out and "tether vault lock prod" in out
    _ok(cli("set", "DB", "--group", "prod", stdin=CANARY))
    assert Vault(Store.open(tether_home), tether_home).resolve("DB") == CANARY
    assert "unlocked until" in _ok(cli("list"))
    assert "group prod locked" in _ok(cli("lock", "prod"))
    data = json.loads(_ok(cli("list", "--json")))
    assert data["groups"] == [
        {"name": "prod", "protected": True, "locked": True, "unlocked_until_ms": None, "items": 1},
    ]
    _refused(cli("group", "rm", "prod"), "REFUSED", "still holds 1 secret")
    _refused(cli("lock", "nope"), "NOT_FOUND", "vault group 'nope' does not exist")


def test_cli_actions_are_audited_by_name_and_nothing_holds_the_canary(tether_home: Path, cli: Cli) -> None:
    _ok(cli("group", "create", "prod", stdin=PASSPHRASE + "\n"))
    _ok(cli("unlock", "prod", stdin=PASSPHRASE + "\n"))
    _ok(cli("set", "DB", "--group", "prod", stdin=CANARY))
    _refused(cli("unlock", "prod", stdin="wrong\n"), "REFUSED", "wrong passphrase")
    _ok(cli("lock", "prod"))
    _ok(cli("group", "create", "plain", "--no-passphrase"))
    _ok(cli("list"))
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
