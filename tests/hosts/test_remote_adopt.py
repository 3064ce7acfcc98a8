"""A remote shell keeps what it orphans, as a local one does: where the host has a ``python3``, the
pane's bash is a child subreaper, so closing or respawning the shell ends every process it
started there — one that cleared its environment and left its session too — and the bash is
otherwise the shell it would be. A host without ``python3`` runs it as it is, and its close still
ends the shell's children that cleared their environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from shell_harness import call, open_shell, run, shell_client
from sshd_harness import RemoteHosts, path_without

from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until

# No marker and orphaned at once, out of the shell's session: only ancestry finds them.
_ESCAPES = (
    "env -i /usr/bin/setsid /usr/bin/sleep {} > /dev/null 2>&1 &",
    # The same, twice removed (its parent sh ends at once) and ignoring SIGTERM.
    '(env -i /bin/sh -c \'trap "" HUP TERM; /usr/bin/setsid /usr/bin/sleep "$0" > /dev/null 2>&1 &\' {} &)',
    # tether's own (as a tether started in the shell would be): spared with what is below it.
    "env -i TETHER_DAEMON=test /usr/bin/setsid /usr/bin/sleep {} > /dev/null 2>&1 &",
)
_BYPASS = {"bypassGuard": True, "reason": "the test starts escapees on purpose"}


def _pane_pid(box_home: Path, shell: str) -> int:
    out = subprocess.run(
        ["tmux", "-S", str(box_home / "tmux.sock"), "display", "-p", "-t", f"={shell}:", "#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.strip())


def _ppid(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


async def _manage(client: object, shell: str, kind: str) -> dict[str, object]:
    _, data = await call(
        client,  # type: ignore[arg-type]
        "shell_manage",
        {"tasks": [{"target": {"sessions": shell}, "action": {"kind": kind}}]},
    )
    task: dict[str, object] = data["tasks"][0]
    return task


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["close", "respawn"])
async def test_closing_or_respawning_a_remote_shell_ends_every_process_it_started(
    tether_home: Path, remote: RemoteHosts, kind: str
) -> None:
    remote.add("box-a")
    *tokens, own = [unique_sleep_arg() for _ in _ESCAPES]
    pieces = [form.format(token) for form, token in zip(_ESCAPES, [*tokens, own], strict=True)]
    command = " ".join(p if p.endswith("&") else p + ";" for p in pieces)
    try:
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, host="box-a")
            out = await run(client, shell, command, safety=_BYPASS)
            assert out["exitCode"] == 0, repr(out)
            assert wait_until(lambda: all(alive_with(token) for token in [*tokens, own]))
            task = await _manage(client, shell, kind)
            assert task["ok"] is True, task
            # Ended by the time the call answers; tether's own is not the shell's.
            assert [t for t in tokens if alive_with(t)] == [], task
            assert alive_with(own), task
            if kind == "respawn":
                # The new shell (same marker) is not taken for a leftover of the old one.
                again = await run(client, shell, "echo still-here")
                assert again["exitCode"] == 0 and again["lines"] == ["still-here"], again
    finally:
        kill_all([pid for token in [*tokens, own] for pid in alive_with(token)])


_FACTS = (
    'echo "comm=$(cat /proc/$$/comm) zero=$0 ctype=${LC_CTYPE-unset} own=${TETHER_DAEMON-unset}"; '
    'yes | head -1 > /dev/null; echo "yes=${PIPESTATUS[0]}"; echo "pid=$$"; (sleep TOKEN &)'
)


@pytest.mark.timeout(300)
async def test_a_remote_shell_adopts_its_orphans_and_is_the_shell_it_would_be_otherwise(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path
) -> None:
    # box-a has a python3 (the launcher runs); box-b's sessions have a PATH without one (bash as
    # it is). Both shells answer alike, but for who an orphan's parent is.
    boxes = {
        "box-a": remote.add("box-a"),
        "box-b": remote.add("box-b", path=path_without("python", tmp_path / "bin")),
    }
    tokens = {name: unique_sleep_arg() for name in boxes}
    try:
        async with shell_client(tether_home) as client:
            said = {}
            for name, box in boxes.items():
                shell = await open_shell(client, host=name)
                out = await run(client, shell, _FACTS.replace("TOKEN", tokens[name]))
                assert out["exitCode"] == 0, repr(out)
                *facts, pid_line = out["lines"]
                # The pane's process is the bash itself (the launcher exec'd it, same pid).
                pid = _pane_pid(box.home, shell)
                assert pid_line == f"pid={pid}", out
                assert wait_until(lambda token=tokens[name]: bool(alive_with(token)))
                [orphan] = alive_with(tokens[name])
                said[name] = (facts, _ppid(orphan) == pid)
        assert said["box-a"][0] == said["box-b"][0], said
        first, *rest = said["box-a"][0]
        assert first.startswith("comm=bash zero=bash ") and first.endswith(" own=unset"), said
        assert rest == ["yes=141"], said
        assert said["box-a"][1] is True, said  # the subreaper took the orphan
        assert said["box-b"][1] is False, said  # no python3 there: PID 1 (or a subreaper above) did
    finally:
        kill_all([pid for token in tokens.values() for pid in alive_with(token)])


@pytest.mark.timeout(300)
async def test_closing_a_shell_on_a_host_without_python3_ends_its_children_that_cleared_their_environment(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path
) -> None:
    # Unadopted, the bash still has its own children when the close begins: they are found below
    # it before tmux ends the pane, marker or not (this one ignores the hang-up too).
    remote.add("box-b", path=path_without("python", tmp_path / "bin"))
    token = unique_sleep_arg()
    try:
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, host="box-b")
            command = f"env -i /usr/bin/nohup /usr/bin/sleep {token} > /dev/null 2>&1 &"
            out = await run(client, shell, command, safety=_BYPASS)
            assert out["exitCode"] == 0, repr(out)
            assert wait_until(lambda: bool(alive_with(token)))
            task = await _manage(client, shell, "close")
            assert task["ok"] is True, task
            assert alive_with(token) == [], task
    finally:
        kill_all(alive_with(token))
