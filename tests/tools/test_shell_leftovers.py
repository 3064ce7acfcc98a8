"""A closed shell leaves nothing running: every process started in it ends with it — background
jobs, ``setsid`` and ``nohup`` escapees, disowned jobs, double forks, processes that ignore
SIGHUP and SIGTERM, stopped ones — however far they went from the shell's session."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from shell_harness import call, open_shell, run, shell_client, tmux

from hang import HANG_S
from proc_probe import alive_with, freezer, kill_all, unique_sleep_arg, wait_until
from tether.config import load_config
from tether.shells import Shells
from tether.shells import open_shell as open_shell_here

_ESCAPES = (
    "sleep {} &",
    "setsid sleep {} &",
    "nohup sleep {} > /dev/null 2>&1 &",
    "sleep {} & disown",
    "(trap '' HUP TERM; exec sleep {}) &",
    "( (sleep {} &) & )",
    # Stopped: the token is its own argument ($0), so the stopped sh is found by it too.
    '(setsid sh -c \'trap "" HUP TERM; kill -STOP $$; exec sleep "$0"\' {} &)',
    # No marker, ignores SIGHUP, but still the shell's child when it closes.
    "env -i PATH=$PATH nohup sleep {} > /dev/null 2>&1 &",
    # No marker and orphaned at once, out of the shell's session: the shell adopts it.
    "env -i /usr/bin/setsid sleep {} > /dev/null 2>&1 &",
    # The same, twice removed (its parent sh ends at once) and ignoring SIGTERM.
    '(env -i /bin/sh -c \'trap "" HUP TERM; /usr/bin/setsid /bin/sleep "$0" > /dev/null 2>&1 &\' {} &)',
)


# The guard cannot parse every quoting above; what it would say is not what this test is about.
_BYPASS = {"bypassGuard": True, "reason": "the test starts escapees on purpose"}


def _commands() -> tuple[str, list[str]]:
    tokens = [unique_sleep_arg() for _ in _ESCAPES]
    pieces = [form.format(token) for form, token in zip(_ESCAPES, tokens, strict=True)]
    return " ".join(p if p.endswith("&") else p + ";" for p in pieces), tokens


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ")


def _survivors(tokens: list[str]) -> list[int]:
    return [pid for token in tokens for pid in alive_with(token)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["close", "respawn"])
async def test_closing_or_respawning_a_shell_ends_every_process_it_started(
    tether_home: Path, kind: str
) -> None:
    command, tokens = _commands()
    try:
        async with shell_client(tether_home) as c:
            shell = await open_shell(c)
            out = await run(c, shell, command, safety=_BYPASS)
            assert out["exitCode"] == 0
            assert wait_until(lambda: all(alive_with(token) for token in tokens))
            _, data = await call(
                c, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": kind}}]}
            )
            assert data["tasks"][0]["ok"], data
            # Ended by the time the call answers: no wait here.
            left = _survivors(tokens)
            assert left == [], [_cmdline(pid) for pid in left]
            if kind == "respawn":
                # The new shell (same id, same marker) is not taken for a leftover of the old one.
                again = await run(c, shell, "echo still-here")
                assert again["exitCode"] == 0 and "still-here" in again["lines"]
    finally:
        kill_all(_survivors(tokens))


def _doors(home: Path) -> list[int]:
    """The command line's tools processes of ``home`` (``python -m tether.cli.door.server … HOME``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tether.cli.door.server" in argv and str(home).encode() in argv:
                found.append(int(entry))
    return found


@pytest.mark.timeout(300)
async def test_tethers_own_tools_process_started_from_a_shell_outlives_it(tether_home: Path) -> None:
    # The home's tools process serves every command line of the home; the first `tether shell`
    # command starts it, wherever that runs. Started from inside a shell, it is not that shell's.
    tether = Path(sys.executable).parent / "tether"
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        out = await run(c, shell, f"{tether} shell list > /dev/null")
        assert out["exitCode"] == 0
        [door] = _doors(tether_home)
        _, data = await call(
            c, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert data["tasks"][0]["ok"], data
        assert _doors(tether_home) == [door]


@pytest.mark.timeout(300)
async def test_a_shell_that_adopts_its_orphans_is_the_shell_it_would_be_otherwise(tether_home: Path) -> None:
    # The pane's bash is made a subreaper by a Python launcher: nothing of the launcher may show.
    async with shell_client(tether_home) as c:
        shell = await open_shell(c)
        out = await run(
            c,
            shell,
            'echo "own=${TETHER_DAEMON-unset}"; yes | head -1 > /dev/null; echo "yes=${PIPESTATUS[0]}"; '
            "echo comm=$(cat /proc/$$/comm)",
        )
        assert out["exitCode"] == 0
        assert out["lines"][-3:] == ["own=unset", "yes=141", "comm=bash"], out
        # The tmux server carries the mark of tether's own processes; its panes do not.
        server = int(tmux(tether_home, "display", "-p", "#{pid}").strip())
        with open(f"/proc/{server}/environ", "rb") as environ:  # noqa: ASYNC230 - a test, a few bytes
            assert b"\0TETHER_DAEMON=tmux-server\0" in b"\0" + environ.read()


@pytest.mark.timeout(300)
async def test_closing_a_shell_whose_bash_ended_spares_the_process_that_took_its_pid(
    tether_home: Path, tmp_path: Path
) -> None:
    # tmux reaps an ended shell's bash and keeps its pane (with the status) until the idle sweep
    # removes it; the pid the pane still names may meanwhile be another process's. Closing the
    # shell then ended that process and everything below it, as if they were the shell's.
    engine = Shells.get(load_config(tether_home))
    token = unique_sleep_arg()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    victim = await asyncio.create_subprocess_exec("sh", "-c", 'sleep "$0" & wait', token, env=clean)
    try:
        shell, _ = await open_shell_here(
            engine, owner="t", label="", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=None
        )
        host, pane = await engine.pane(shell.id)
        await host.type_line(pane, "exit 3")
        assert wait_until(lambda: tmux(tether_home, "display", "-p", "-t", shell.id, "#{pane_dead}") == "1\n")
        dead = (await host.panes())[shell.id]
        assert dead.dead
        assert wait_until(lambda: bool(alive_with(token)))
        # What a close does after its listing, with the pid taken by another process meanwhile.
        host._panes[shell.id] = replace(dead, pid=victim.pid)
        await host.kill(shell.id)
        assert victim.returncode is None and alive_with(token), "the other process's tree was ended"
    finally:
        if victim.returncode is None:
            victim.kill()
        await victim.wait()
        kill_all(alive_with(token))
        await engine.close()


def _cancelled_closes(home: Path, shell: str) -> int:
    """How many ``shell_manage`` records of ``shell`` say the call was cancelled: the audit record
    is appended once the call's handler has ended, so it marks the end of the cancelled close."""
    count = 0
    for path in (home / "audit").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if (
                record["tool"] == "shell_manage"
                and shell in record["targets"]
                and record["outcome"] == "cancelled"
            ):
                count += 1
    return count


@pytest.mark.timeout(300)
async def test_a_close_cancelled_while_it_ends_the_shells_processes_still_ends_them(
    tether_home: Path,
) -> None:
    # The close ended the tmux session, then gave what ignores SIGTERM its grace; cancelled then
    # (the client's notifications/cancelled, the client leaving, the session's DELETE) it stopped
    # looking after them, and with the shell gone nothing would ever find them again.
    (tether_home / "config.toml").write_text("[shell]\ngrace_ms = 600000\n")  # a grace no test waits out
    token = unique_sleep_arg()
    try:
        async with shell_client(tether_home) as c:
            shell = await open_shell(c)
            out = await run(c, shell, f"(trap '' HUP TERM; exec setsid sleep {token}) &", safety=_BYPASS)
            assert out["exitCode"] == 0
            assert wait_until(lambda: bool(alive_with(token)))
            close = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
            with anyio.fail_after(HANG_S):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(c.call_tool, "shell_manage", close)
                    # The session is gone once tmux ended it: the close is then in the grace.
                    while shell in tmux(tether_home, "list-sessions", "-F", "#{session_name}"):
                        await anyio.sleep(0.005)
                    tg.cancel_scope.cancel()  # the official client sends notifications/cancelled
                while _cancelled_closes(tether_home, shell) == 0:
                    await anyio.sleep(0.005)
            assert alive_with(token) == [], "a process of the closed shell outlived the cancelled close"
            again = await c.call_tool("shell_state", {})  # the server serves on
            assert not again.is_error
    finally:
        kill_all(alive_with(token))


async def _frozen_sweep(tether_home: Path, kind: str) -> None:
    """Close (or ``kind`` respawn) a shell one of whose processes is frozen: a process in a frozen
    cgroup ends at no signal until it is thawed, so the sweep cannot end it, and the call says so —
    in its result (text and data) and in its audit record; the shell's other process ends as ever,
    and the same call on a shell that leaves nothing behind says nothing of the kind."""
    (tether_home / "config.toml").write_text("[shell]\ngrace_ms = 100\n")
    token, ended = unique_sleep_arg(), unique_sleep_arg()
    action = {"action": {"kind": kind}}
    with freezer() as freeze:
        try:
            async with shell_client(tether_home) as c:
                shell = await open_shell(c)
                await run(c, shell, f"sleep {token} & sleep {ended} &")
                assert wait_until(lambda: bool(alive_with(token) and alive_with(ended)))
                [pid] = alive_with(token)
                freeze(pid)
                text, data = await call(
                    c, "shell_manage", {"tasks": [{"target": {"sessions": shell}, **action}]}
                )
                task = data["tasks"][0]
                assert task["ok"] is True, data
                assert task["data"]["stillRunning"] == [{"pid": pid, "command": f"sleep {token}"}], data
                assert "notEnded" not in task["data"]
                assert f"still running after SIGKILL: pid {pid} (sleep {token})" in text
                assert alive_with(ended) == []  # the rest of the shell's processes ended as ever
                _, audit = await call(c, "shell_audit", {"tasks": [{"action": {"kind": "audit"}}]})
                [record] = [r for r in audit["tasks"][0]["records"] if r["tool"] == "shell_manage"]
                assert record["outcome"] == "ok"
                assert f"{shell}: still running after SIGKILL: pid {pid} (sleep {token})" in record["detail"]
                if kind == "respawn":  # the new shell works
                    assert (await run(c, shell, "echo again-$((1+1))"))["lines"][:1] == ["again-2"]
                # Another shell (a respawned one's frozen process is still its own).
                other = await open_shell(c)
                text, data = await call(
                    c, "shell_manage", {"tasks": [{"target": {"sessions": other}, **action}]}
                )
                assert data["tasks"][0]["data"]["stillRunning"] == [] and "still running" not in text
        finally:
            kill_all(alive_with(ended))


@pytest.mark.timeout(300)
async def test_closing_a_shell_says_which_of_its_processes_outlived_the_sweep(tether_home: Path) -> None:
    await _frozen_sweep(tether_home, "close")


@pytest.mark.timeout(300)
async def test_respawning_a_shell_says_which_of_its_processes_outlived_the_sweep(tether_home: Path) -> None:
    # A respawn ends what the old shell started as a close does, and said nothing of what it could
    # not end (only the tether process's log did).
    await _frozen_sweep(tether_home, "respawn")
