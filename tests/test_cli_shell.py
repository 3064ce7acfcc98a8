"""``tether shell list / lock / unlock``: manual locks that agents see, each action audited as cli
(through the people-only tools, which the CLI calls on its own event loop: in-process calls from an
async test run in a worker thread)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hang import HANG_S
from tether.audit import query, verify
from tether.cli import main
from tether.errors import RefusedError
from tether.shells.records import Records, ShellRecord
from tether.store.db import Store
from tether.store.locks import ShellLocks

SHELL = "dsh-cli001"
OTHER = "dsh-cli002"


@pytest.fixture
def store(tether_home: Path) -> Iterator[Store]:
    s = Store.open(tether_home)
    for shell_id, owner, label in ((SHELL, "conv-a", "build"), (OTHER, "panel", "")):
        Records(s).add_shell(
            ShellRecord(
                id=shell_id,
                owner=owner,
                label=label,
                created_ms=1_700_000_000_000,
                cwd="/repo",
                last_activity_ms=1_700_000_000_000,
                idle_minutes=None,
            )
        )
    yield s
    s.close()


def _cli_records(home: Path) -> list[tuple[str, tuple[str, ...], str]]:
    return [(r.action, r.targets, r.outcome) for r in query(home, source="cli", limit=100)]


async def _main(argv: list[str]) -> int:
    return await anyio.to_thread.run_sync(main, argv)


async def test_lock_refuses_agents_until_unlock(
    tether_home: Path, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await _main(["shell", "lock", SHELL, "--reason", "deploying", "--who", "alice"]) == 0
    out = capsys.readouterr().out
    assert f"{SHELL} locked by alice since " in out and f"`tether shell unlock {SHELL}`" in out
    locks = ShellLocks(tether_home, store)
    with pytest.raises(RefusedError) as err:
        await locks.acquire(SHELL, actor="conv-a")
    assert "is locked by alice since " in str(err.value) and "(deploying)" in str(err.value)
    # Locking again keeps the first lock.
    assert await _main(["shell", "lock", SHELL, "--who", "bob"]) == 0
    assert "already locked by alice" in capsys.readouterr().out
    assert await _main(["shell", "list", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["shells"]}
    assert rows[SHELL]["lockedBy"] == "alice" and rows[SHELL]["lockReason"] == "deploying"
    assert rows[OTHER]["lockedBy"] is None and rows[OTHER]["owner"] == "panel"
    assert await _main(["shell", "unlock", SHELL]) == 0
    assert "unlocked (it was locked by alice" in capsys.readouterr().out
    async with locks.hold(SHELL, actor="conv-a") as lease:
        assert lease.held
    assert await _main(["shell", "unlock", SHELL]) == 0
    assert "was not locked" in capsys.readouterr().out
    assert _cli_records(tether_home) == [
        ("lock", (SHELL,), "ok"),
        ("lock", (SHELL,), "ok"),
        ("list", (), "ok"),
        ("unlock", (SHELL,), "ok"),
        ("unlock", (SHELL,), "ok"),
    ]
    first = query(tether_home, source="cli", limit=100)[0]
    assert (first.actor, first.tool, first.reason) == ("cli", "shell_lock", "deploying")
    assert verify(tether_home).ok


def test_list_table(tether_home: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    main(["shell", "lock", OTHER, "--who", "carol"])
    capsys.readouterr()
    assert main(["shell", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "OWNER", "LABEL", "LOCK", "STARTED", "IN"]
    assert lines[1].split()[:3] == [SHELL, "conv-a", "build"] and lines[1].endswith("/repo")
    assert OTHER in lines[2] and "locked by carol" in lines[2]


def test_list_empty(tether_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shell", "list"]) == 0
    assert "no shells recorded" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["shell", "lock", "nope"], "shell ids look like dsh-ab12cd"),
        (["shell", "lock", "dsh-zzzzzz"], "no shell dsh-zzzzzz is recorded"),
        (["shell", "unlock", "../x"], "shell ids look like dsh-ab12cd"),
        # A long value is not echoed whole (a pasted screenful would fill the error).
        (["shell", "unlock", "x" * 5000], f"shell id '{'x' * 40}'… (5000 characters) is not valid"),
        (["shell", "lock", SHELL, "--who", " "], "name of the person"),
    ],
)
def test_errors_are_one_line_and_audited(
    tether_home: Path, store: Store, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether: ") and message in err and len(err.strip().splitlines()) == 1
    assert _cli_records(tether_home)[-1][2] == "error"


def test_real_process(tether_home: Path, store: Store) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    done = subprocess.run(
        [sys.executable, "-m", "tether", "shell", "lock", SHELL, "--reason", "from a real process"],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr
    lock = ShellLocks(tether_home, store).lock_state(SHELL).manual
    assert lock is not None and lock.why == "from a real process" and lock.source == "cli"


def test_list_shows_an_agents_text_escaped_and_whole_ids(tether_home: Path, store: Store) -> None:
    # An agent names a shell and its working directory; what the command line prints of them reaches
    # a person's terminal, where an escape sequence retitles it, clears it or writes its clipboard
    # (OSC 52). And a default conversation id (21 characters) was cut to 20 in the OWNER column.
    owner = "conv-0123456789abcdef"
    label = "x\x1b]52;c;cHduZWQ=\x07\x1b[2Jy"
    cwd = "/tmp/\x1b[31mred"
    Records(store).add_shell(
        ShellRecord(
            id="dsh-cli003",
            owner=owner,
            label=label,
            created_ms=1_700_000_000_000,
            cwd=cwd,
            last_activity_ms=1_700_000_000_000,
            idle_minutes=None,
        )
    )
    env = {**os.environ, "TETHER_HOME": str(tether_home)}

    def tether(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "tether", *args], capture_output=True, env=env, timeout=HANG_S
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    lock = tether("shell", "lock", "dsh-cli003", "--who", "eve\x1b[2J")
    listing = tether("shell", "list")
    unlock = tether("shell", "unlock", "dsh-cli003")
    for out in (lock, listing, unlock):
        assert "\x1b" not in out and "\x07" not in out, out
    row = next(line for line in listing.splitlines() if line.startswith("dsh-cli003"))
    assert row.split()[:3] == ["dsh-cli003", owner, "x\\u001b]52;c;cHduZWQ=\\u0007\\u001b[2Jy"]
    assert row.endswith("/tmp/\\u001b[31mred")
    assert "locked by eve\\u001b[2J" in lock and "locked by eve\\u001b[2J" in unlock
