"""Everything tether creates under ``TETHER_HOME`` is private: 0600 files, 0700 directories.

A real session against a home that does not exist yet (tether creates it): a ``tether vault set``,
then a ``tether mcp`` conversation with a one-shot command whose output spills, a background job,
a persistent shell that runs a command (pane log, store, audit) and reads it back, an audit query.
Then every path under the home is walked and its mode checked — the database's ``-wal``/``-shm``,
the tmux socket, logs, spill, audit, token and vault included.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import anyio
from shell_harness import call, open_shell, run, shell_client

from tether.cli.door import stop_door

TETHER = str(Path(sys.executable).parent / "tether")
_CONFIGURATION_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(
    encoding="utf-8"
)


def _walk(home: Path) -> dict[str, int]:
    modes = {".": stat.S_IMODE(home.lstat().st_mode)}
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = Path(root) / name
            modes[str(path.relative_to(home))] = path.lstat().st_mode
    return modes


def _wrong(modes: dict[str, int]) -> list[str]:
    bad = []
    for name, mode in modes.items():
        perms = stat.S_IMODE(mode)
        if stat.S_ISDIR(mode) or name == ".":
            ok = perms == 0o700
        elif stat.S_ISLNK(mode):
            ok = True  # a link's own mode means nothing; its target is walked where it lives
        else:
            # Files and sockets: nothing for group or others (tmux toggles the owner's x bit on
            # its socket to say whether clients are attached).
            ok = perms & 0o077 == 0
        if not ok:
            bad.append(f"{name}: {oct(perms)}")
    return bad


async def test_every_path_tether_creates_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"  # does not exist: tether creates it
    env = {**os.environ, "TETHER_HOME": str(home)}
    env.pop("TETHER_CONVERSATION", None)
    stored = await anyio.run_process(
        [TETHER, "vault", "set", "api"], input=b"s3cret-value\n", env=env, check=False
    )
    assert stored.returncode == 0, stored.stderr.decode()
    try:
        async with shell_client(home, "conv-modes") as client:
            text, _ = await call(
                client, "bash", {"command": "head -c 200000 /dev/zero | tr '\\0' x", "description": "spill"}
            )
            assert "[output truncated; full output: " in text
            _, job = await call(
                client, "bash", {"command": "echo job", "description": "job", "run_in_background": True}
            )
            assert job["kind"] == "background"
            shell = await open_shell(client)
            result = await run(client, shell, "echo {{vault.api}} | wc -c")
            assert result["exitCode"] == 0, result
            await call(client, "shell_audit", {"tasks": [{"action": {"kind": "audit"}}]})
            modes = _walk(home)
            bad = _wrong(modes)
    finally:
        stop_door(home)  # the tools process `tether vault set` started
        socket = home / "tmux.sock"
        if socket.exists():
            await anyio.run_process(["tmux", "-S", str(socket), "kill-server"], check=False)
    expected = {"tether.db", "tether.db-wal", "tether.db-shm", "tmux.sock", "audit", "logs", "spill"}
    assert expected <= set(modes), sorted(modes)
    assert any(name.startswith("logs/dsh-") for name in modes), sorted(modes)
    assert bad == [], bad
    # docs/configuration.md names everything a home holds (its top level, and logs/times/).
    entries = {name.split("/")[0] for name in modes if name != "."}
    entries |= {"logs/times/"} if any(name.startswith("logs/times/") for name in modes) else set()
    undocumented = sorted(name for name in entries if f"`{name}" not in _CONFIGURATION_PAGE)
    assert undocumented == [], f"in a home, named nowhere in docs/configuration.md: {undocumented}"
