"""Planted credentials never reach a command, one-shot or persistent, of a real ``tether mcp``.

The server is started with every canary of ``env_canaries`` (and the benign variables) in its own
environment; the ``bash`` tool and a persistent shell each dump their environment to a file, which
the test reads: no canary value in either, every benign name present.
"""

from __future__ import annotations

from pathlib import Path

from shell_harness import call, open_shell, run, shell_client

from env_canaries import BENIGN, CANARIES

# Set by bash or tmux themselves in a shell (or needed to start the server): names checked only.
_SHELL_SETS = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "TERM", "SHELL", "COLORTERM", "LANG", "LC_ALL"}


def _environment(path: Path) -> dict[str, str]:
    entries = path.read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def _check(env: dict[str, str], where: str) -> None:
    leaked = sorted(name for name, value in CANARIES.items() if any(value in v for v in env.values()))
    assert leaked == [], f"{where}: planted credentials reached the command: {leaked}"
    # bash drops an inherited OLDPWD that names no directory (/home/dev does not exist here).
    missing = sorted(name for name in BENIGN if name not in env and name != "OLDPWD")
    assert missing == [], f"{where}: ordinary variables were scrubbed: {missing}"
    changed = sorted(n for n, v in BENIGN.items() if n not in _SHELL_SETS and env[n] != v)
    assert changed == [], f"{where}: ordinary variables changed: {changed}"


async def test_planted_credentials_reach_no_command(tether_home: Path, tmp_path: Path) -> None:
    planted = {name: value for name, value in {**BENIGN, **CANARIES}.items() if name not in ("PATH", "HOME")}
    oneshot, persistent = tmp_path / "oneshot.env", tmp_path / "shell.env"
    async with shell_client(tether_home, extra_env=planted) as client:
        text, _ = await call(client, "bash", {"command": f"env -0 > {oneshot}", "description": "dump env"})
        assert text == "(no output)"
        shell = await open_shell(client)
        result = await run(client, shell, f"env -0 > {persistent}")
        assert result["exitCode"] == 0, result
    _check(_environment(oneshot), "bash tool")
    _check(_environment(persistent), "persistent shell")
