"""What the account's shell start-up files on a host do to tether's channels there: read
standard input (they get blank lines, never a byte of a channel's protocol), print banners
(skipped), or take long (paid once per open, in parallel, not once per channel in sequence)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shell_harness import call, open_shell, run, shell_client
from sshd_harness import RemoteHosts

# Only a command session reads: an interactive shell (the pane's, which sources ~/.bashrc too)
# would wait for a person to type.
_READS = "case $- in *i*) ;; *) read -r x; read -r y ;; esac"


@pytest.mark.parametrize(
    "bashrc",
    [
        pytest.param(_READS, id="reads-stdin"),
        pytest.param("echo 'Welcome to box-a'; printf 'a banner without a line break'", id="banner"),
        pytest.param(f"echo 'Welcome'; {_READS}; printf 'more'", id="banner-and-reads"),
    ],
)
async def test_start_up_files_that_read_stdin_or_print_take_nothing_of_a_channel(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bashrc: str
) -> None:
    # bash reads ~/.bashrc for a command sshd runs: a `read` there took the first line tether wrote
    # to a channel (a tmux command, a question), and the open failed with CONNECTION_LOST.
    (tmp_path / ".bashrc").write_text(bashrc + "\n")
    monkeypatch.setenv("HOME", str(tmp_path))  # the host's sessions get it (see sshd_harness)
    remote.add("box-a", timeout=3)
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        out = await run(client, shell, "echo $((6 * 7))")
        assert out["exitCode"] == 0 and out["lines"] == ["42"], out
        # A question to the host's command shell (its directory) and a second shell (its log
        # stream on a channel logged in ahead) work the same.
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert data["shells"][0]["cwd"].startswith("/"), data
        other = await open_shell(client, host="box-a")
        out = await run(client, other, "printf 'x%s\\n' y")
        assert out["exitCode"] == 0 and out["lines"] == ["xy"], out


async def test_an_open_pays_a_slow_login_once(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each command session's start-up waits (up to 15 s) until four logins are under way at once,
    # and notes how many it saw. An open needs the probe, the control client, the command shell
    # and the shell's log stream: logged in one after the other, the first waits alone.
    barrier = tmp_path / "logins"
    barrier.mkdir()
    (tmp_path / ".bashrc").write_text(
        "case $- in *i*) return ;; esac\n"
        f"touch {barrier}/$$; n=0\n"
        f'while [ "$(ls {barrier} | wc -l)" -lt 4 ] && [ $n -lt 150 ]; do sleep 0.1; n=$((n + 1)); done\n'
        f"ls {barrier} | wc -l >> {tmp_path}/seen\n"
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    remote.add("box-a", timeout=10)  # the login deadline (25 s) outlasts a lone login's wait
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        out = await run(client, shell, "echo ok")
        assert out["exitCode"] == 0 and out["lines"] == ["ok"], out
    seen = [int(n) for n in (tmp_path / "seen").read_text().split()]
    # Every login the open paid ran alongside the others: none waited alone, or for the rest.
    assert len(seen) >= 4 and min(seen) >= 4, seen
