"""``tether panel add / list / revoke`` as a person runs them: real ``python -m tether`` processes
(through the home's tools process), each audited by name, the token printed once and kept nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hang import HANG_S
from tether.store.db import Store
from tether.store.panel_people import PanelPeople


def _tether(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "tether", "panel", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )


def _files_holding(home: Path, text: str) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_add_list_revoke_in_real_processes(tether_home: Path) -> None:
    added = _tether(tether_home, "add", "alice", "--url", "http://127.0.0.1:9380/")
    assert added.returncode == 0, added.stderr
    [token] = [line.split(": ", 1)[1] for line in added.stdout.splitlines() if line.startswith("token: ")]
    assert f"http://127.0.0.1:9380/panel/login?token={token}" in added.stdout
    store = Store.open(tether_home)
    try:
        people = PanelPeople(store, tether_home)
        person = people.person_of_token(token)
        assert person is not None and person.name == "alice"

        again = _tether(tether_home, "add", "ALICE")
        assert again.returncode == 2 and "INVALID_ARGUMENT: alice already has panel access" in again.stderr
        markup = _tether(tether_home, "add", "<img src=x onerror=alert(1)>")
        assert markup.returncode == 2 and "is not a person's name" in markup.stderr
        assert "<img" not in markup.stderr
        assert _tether(tether_home, "add", "bob").returncode == 0

        listed = _tether(tether_home, "list")
        assert listed.returncode == 0 and token not in listed.stdout
        assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["alice", "bob"]

        revoked = _tether(tether_home, "revoke", "alice")
        assert revoked.returncode == 0 and "alice's panel access is revoked" in revoked.stdout
        assert people.person_of_token(token) is None
        twice = _tether(tether_home, "revoke", "alice")
        assert twice.returncode == 2 and "NOT_FOUND: alice's panel access was already revoked" in twice.stderr
        rows = json.loads(_tether(tether_home, "list", "--json").stdout)
        assert [(r["name"], r["revokedMs"] is not None) for r in rows] == [("alice", True), ("bob", False)]
    finally:
        store.close()
    records = []
    for day in sorted((tether_home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    done = [
        (r["action"], r["actor"], r["targets"], r["outcome"]) for r in records if r["tool"] == "panel_people"
    ]
    assert done == [
        ("add", "cli", ["alice"], "ok"),
        ("add", "cli", ["ALICE"], "error"),
        ("add", "cli", [], "error"),  # a refused name is not written
        ("add", "cli", ["bob"], "ok"),
        ("list", "cli", [], "ok"),
        ("revoke", "cli", ["alice"], "ok"),
        ("revoke", "cli", ["alice"], "error"),
        ("list", "cli", [], "ok"),
    ]
    assert _files_holding(tether_home, token) == []
