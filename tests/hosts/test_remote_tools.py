"""A shell on a remote host (a real sshd on 127.0.0.1) through ``tether mcp`` and the MCP client:
everything the tools do on a local shell, with the shell living in the host's own tmux server."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
from safety_harness import audit_records, manual_locks, task, vault
from shell_harness import call, open_shell, read, run, shell_client
from sshd_harness import RemoteHosts

from hang import HANG_MS, HANG_S


def _openers(path: Path) -> set[int]:
    """Processes holding ``path`` open (a lock holder, and a writer waiting for the lock)."""
    pids: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                        pids.add(int(pid))
    return pids


def _tmux(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True)


async def test_open_run_every_wait_and_read_on_a_remote_shell(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path
) -> None:
    box = remote.add("box-a")
    async with shell_client(tether_home) as client:
        text, data = await call(
            client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a", "label": "far"}}]}
        )
        shell = data["tasks"][0]["shell"]
        assert f"opened {shell} on host box-a" in text
        # The shell is a session of the host's own tmux server, and not of this machine's.
        assert _tmux(box.home, "has-session", "-t", f"={shell}").returncode == 0
        assert _tmux(tether_home, "has-session", "-t", f"={shell}").returncode != 0
        assert (box.home / "logs" / f"{shell}.log").exists()
        mirror = tether_home / "hosts" / "box-a" / "logs" / f"{shell}.log"
        # Private on both sides: files 0600, directories 0700.
        for path in (box.home / "logs" / f"{shell}.log", box.home / "rc" / f"{shell}.bash", mirror):
            assert path.stat().st_mode & 0o777 == 0o600, path
        for path in (
            box.home / "logs",
            box.home / "rc",
            mirror.parent,
            mirror.parent.parent,
            tether_home / "ssh",
        ):
            assert path.stat().st_mode & 0o777 == 0o700, path

        assert (await run(client, shell, "true"))["exitCode"] == 0
        await run(client, shell, "cd /tmp && X=42")
        assert (await run(client, shell, "echo $X $PWD"))["lines"] == ["42 /tmp"]
        out = await run(client, shell, "(exit 4)", wait={"kind": "exit", "code": 0})
        assert out["exitCode"] == 4 and out["met"] is False
        out = await run(client, shell, "cat <<'EOF'\nline one\nEOF\n(exit 6)")
        assert out["exitCode"] == 6 and out["lines"] == ["line one"]
        # every wait kind
        out = await run(client, shell, "echo idle-done", wait={"kind": "idle"})
        assert out["met"] is True and out["lines"] == ["idle-done"]
        out = await run(
            client, shell, "sleep 0.2; echo READY-1", wait={"kind": "match", "pattern": "READY-\\d"}
        )
        assert out["met"] is True
        out = await run(client, shell, "sleep 0.1; printf '\\a'", wait={"kind": "bell"})
        assert out["met"] is True
        target = tmp_path / "made.txt"
        out = await run(
            client, shell, f"sleep 0.2; touch {target}", wait={"kind": "file", "path": str(target)}
        )
        assert out["met"] is True
        out = await run(client, shell, "sleep 0.3", wait={"kind": "noproc", "proc": "sleep", "pollMs": 20})
        assert out["met"] is True
        out = await run(client, shell, "sleep 0.3", wait={"kind": "cpu", "threshold": 50, "pollMs": 20})
        assert out["met"] is True
        await run(client, shell, "sleep 0.2; python3 -c 'import time; time.sleep(30)'", wait={"kind": "none"})
        out = await read(client, shell, wait={"kind": "foreground", "proc": "python3"})
        assert out["met"] is True
        text, data = await call(client, "shell_state", {"sessions": shell})
        assert data["shells"][0]["fg"] == "python3" and data["shells"][0]["host"] == "box-a", text
        assert "host=box-a" in text and "busy" in data["shells"][0]["states"]
        await task(client, "shell_send", shell, {"kind": "send", "text": "", "keys": ["C-c"]})
        out = await read(client, shell, wait={"kind": "idle"})
        assert out["met"] is True
        # Text typed to a program: idle once nothing in front works (the host's process states).
        out = await run(client, shell, "python3 -q", wait={"kind": "match", "pattern": ">>> "})
        assert out["met"] is True
        idle = {"kind": "idle", "timeoutMs": HANG_MS}
        out = await run(client, shell, "x = sum(range(3 * 10**7)); print('do' + 'ne')", wait=idle)
        assert out["met"] is True and "done" in out["lines"], out
        assert (await run(client, shell, "exit()", wait=idle))["met"] is True
        assert (await run(client, shell, "(exit 5)"))["exitCode"] == 5
        # wait none, then an exit wait bound to the run, reading what came since
        first = await run(
            client, shell, "for i in 1 2 3; do echo n$i; sleep 0.1; done; (exit 9)", wait={"kind": "none"}
        )
        assert first["runId"] and first["exitCode"] is None
        out = await read(
            client, shell, {"kind": "read", "mode": "since"}, wait={"kind": "exit", "runId": first["runId"]}
        )
        assert out["exitCode"] == 9 and [x for x in out["lines"] if x.startswith("n")] == ["n1", "n2", "n3"]
        # a timeout reports and never kills
        out = await run(client, shell, "sleep 2", wait={"kind": "exit", "timeoutMs": 200})
        assert out["met"] is False and out["exitCode"] is None
        out = await read(client, shell, wait={"kind": "exit", "runId": out["runId"], "timeoutMs": HANG_MS})
        assert out["exitCode"] == 0 and out["met"] is True
        # the read modes: screen and tail from the host's tmux, history and search from the mirror
        await run(client, shell, "echo SCREEN-MARK")
        for mode in ("screen", "tail", "history", "summary", "diff"):
            out = await read(client, shell, {"kind": "read", "mode": mode})
            joined = "\n".join(out["lines"])
            assert mode == "diff" or "SCREEN-MARK" in joined, (mode, out)
        out = await read(client, shell, {"kind": "read", "search": "^n[0-9]$"})
        assert out["lines"][0].startswith("3 matches"), out
        # the mirror holds exactly the host's log, byte for byte
        with anyio.fail_after(HANG_S):
            while mirror.read_bytes() != (box.home / "logs" / f"{shell}.log").read_bytes():
                await anyio.sleep(0.02)  # the last prompt may still be on its way
        # filters: by host
        _, data = await call(client, "shell_state", {"host": "box-a"})
        assert [r["shell"] for r in data["shells"]] == [shell]
        _, data = await call(client, "shell_state", {"host": "local"})
        assert data["shells"] == []
        text, data = await call(client, "shell_state", {"host": "nowhere"})
        assert "no host 'nowhere' is configured" in text and "box-a, local" in text
        # an unknown host at open lists the configured ones; a missing directory on the host is named
        text, data = await call(
            client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "nope"}}]}
        )
        assert data["tasks"][0]["errorCode"] == "INVALID_ARGUMENT", text
        assert "configured hosts: box-a, local" in data["tasks"][0]["error"]
        text, data = await call(
            client,
            "shell_open",
            {"tasks": [{"action": {"kind": "open", "host": "box-a", "cwd": "/no/such/dir"}}]},
        )
        assert "is not a directory on host box-a" in data["tasks"][0]["error"], text
        # exec bash replaces the shell there: the integration is installed again, codes stay exact
        assert (await run(client, shell, "exec bash"))["exitCode"] == 0
        assert (await run(client, shell, "(exit 18)"))["exitCode"] == 18
        # resize (the host's terminal has the size when the call returns) and respawn
        _, data = await call(
            client,
            "shell_manage",
            {
                "tasks": [
                    {"target": {"sessions": shell}, "action": {"kind": "resize", "cols": 100, "rows": 30}}
                ]
            },
        )
        assert data["tasks"][0]["ok"], data
        assert (await run(client, shell, "stty size"))["lines"] == ["30 100"]
        _, data = await call(
            client,
            "shell_manage",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "respawn"}}]},
        )
        assert data["tasks"][0]["ok"], data
        out = await run(client, shell, "echo ${X:-unset}; (exit 3)")
        assert out["lines"] == ["unset"] and out["exitCode"] == 3  # a fresh bash, with integration
        # close: the host keeps nothing of the shell; the mirror stays here
        _, data = await call(
            client, "shell_manage", {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        )
        assert _tmux(box.home, "has-session", "-t", f"={shell}").returncode != 0
        assert not (box.home / "logs" / f"{shell}.log").exists()
        assert not (box.home / "rc" / f"{shell}.bash").exists()
        assert mirror.exists()
        # revive: the new shell runs where the old one did, its log starting with the old scrollback
        text, data = await call(
            client, "shell_open", {"tasks": [{"action": {"kind": "open", "from": shell}}]}
        )
        revived = data["tasks"][0]["shell"]
        assert f"opened {revived} on host box-a" in text
        assert _tmux(box.home, "has-session", "-t", f"={revived}").returncode == 0
        out = await read(client, revived, {"kind": "read", "search": "SCREEN-MARK"})
        assert not out["lines"][0].startswith("0 matches"), out
        out = await run(client, revived, "echo back")
        assert out["exitCode"] == 0 and out["lines"] == ["back"]


async def test_history_and_search_after_20_megabytes(tether_home: Path, remote: RemoteHosts) -> None:
    box = remote.add("box-a")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        n = 2_600_000  # seq 1..n prints ~20 MB
        out = await run(
            client,
            shell,
            f"seq 1 {n}",
            wait={"kind": "exit", "timeoutMs": HANG_MS},
            output={"showing": "summary"},
        )
        assert out["exitCode"] == 0 and out["lines"][-1] == f"[{n} lines total]", out
        remote_log = box.home / "logs" / f"{shell}.log"
        mirror = tether_home / "hosts" / "box-a" / "logs" / f"{shell}.log"
        assert remote_log.stat().st_size > 20_000_000
        assert mirror.stat().st_size >= remote_log.stat().st_size - 4096  # only the prompt may trail
        out = await read(client, shell, {"kind": "read", "mode": "history"})
        # output.lines (20): the last numbers and the prompt after them, behind the paging note.
        assert "earlier lines not shown" in out["lines"][0] and out["before"] > 20_000_000, out["lines"][0]
        numbers = [int(x) for x in out["lines"][1:] if x.isdigit()]
        assert numbers == list(range(n - len(numbers) + 1, n + 1)) and len(numbers) >= 18, out["lines"]
        # The page before, 2000 lines, ends exactly where this one began.
        page = await read(
            client,
            shell,
            {"kind": "read", "mode": "history", "before": out["before"]},
            output={"lines": 2000},
        )
        assert page["lines"][1:] == [str(k) for k in range(numbers[0] - 2000, numbers[0])]
        out = await read(client, shell, {"kind": "read", "search": "123456"})
        expected = sum(1 for i in range(1, n + 1) if "123456" in str(i))
        assert out["lines"][0].startswith(f"{expected} matches"), out["lines"][0]


async def test_vault_reference_lock_and_audit_name_the_host(tether_home: Path, remote: RemoteHosts) -> None:
    box = remote.add("box-a")
    secret = 'Rmt/+7"x y\\z&q=ÄÖ-9k2P'
    vault(tether_home).set("C", secret)
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client, host="box-a")
        # The value reaches the remote process (its hash comes back) ...
        out = await run(client, shell, "printf '%s' {{vault.C}} | sha256sum | cut -c1-64")
        assert out["exitCode"] == 0 and out["lines"] == [hashlib.sha256(secret.encode()).hexdigest()]
        # ... printed, it is masked in what the model gets ...
        out = await run(client, shell, "printf 'raw:%s\\n' {{vault.C}}")
        assert out["lines"] == ["raw:[vault:C]"], out
        # ... and the command lines the host's log (and its mirror) hold carry only the variable.
        await run(client, shell, "true")
        log = (box.home / "logs" / f"{shell}.log").read_bytes()
        mirror = (tether_home / "hosts" / "box-a" / "logs" / f"{shell}.log").read_bytes()
        for data in (log, mirror):
            assert b"__TETHER_V_C" in data and b"sha256sum" in data
            assert data.count(secret.encode()) == 1  # only the printed raw: line, never a command line
        for path in box.home.rglob("*"):
            if path.is_file() and path.suffix != ".log":
                assert secret.encode() not in path.read_bytes(), path
        # a manual lock refuses a write at once
        manual_locks(tether_home).lock(shell, who="alice", why="deploying")
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "echo no"})
        assert out["errorCode"] == "REFUSED" and "locked by alice" in out["error"], out
        manual_locks(tether_home).unlock(shell)
        assert (await run(client, shell, "echo yes"))["lines"] == ["yes"]
        # the guard judges a remote shell's commands as a local one's
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "rm -rf /"})
        assert out["errorCode"] == "BLOCKED", out
    records = audit_records(tether_home)
    runs = [r for r in records if r["tool"] == "shell_run" and shell in r["targets"]]
    assert runs and all(r["extra"]["hosts"] == {shell: "box-a"} for r in runs), runs[-1]
    opened = [r for r in records if r["tool"] == "shell_open"]
    assert opened[0]["extra"]["hosts"] == {shell: "box-a"}
    assert any(r["command"] == "printf 'raw:%s\\n' {{vault.C}}" for r in runs)  # as written
    assert all(secret not in str(r) for r in records)
    refused = [r for r in runs if r["outcome"] == "refused"]
    assert refused and "alice" in refused[0]["detail"]
    assert [r["outcome"] for r in runs if r["command"] == "rm -rf /"] == ["blocked"]


async def test_two_conversations_share_a_remote_shell_and_its_mirror(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path
) -> None:
    """Two tether processes on one home: one streams the shell's log into the mirror, the other
    follows the file; their writes are serialised by the shell's lock."""
    remote.add("box-a")
    go = tmp_path / "go"
    async with shell_client(tether_home, "conv-a") as a, shell_client(tether_home, "conv-b") as b:
        shell = await open_shell(a, host="box-a")
        results: dict[str, dict[str, Any]] = {}

        async def first() -> None:
            results["a"] = await run(
                a, shell, f"echo A-one; until [ -e {go} ]; do sleep 0.05; done; echo A-two"
            )

        async def second() -> None:
            results["b"] = await run(b, shell, "echo B-one")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            with anyio.fail_after(HANG_S):
                while True:
                    _, data = await call(b, "shell_state", {"sessions": shell})
                    if "locked" in data["shells"][0]["states"]:
                        break
                    await anyio.sleep(0.02)
            tg.start_soon(second)
            lock_file = tether_home / "locks" / f"{shell}.lock"
            with anyio.fail_after(HANG_S):
                while len(_openers(lock_file)) < 2:  # B's server waits on the shell's lock
                    await anyio.sleep(0.02)
            go.touch()
        assert results["a"]["exitCode"] == 0 and results["a"]["lines"] == ["A-one", "A-two"]
        assert results["b"]["exitCode"] == 0 and results["b"]["lines"] == ["B-one"], results["b"]
        _, out = await task(b, "shell_read", shell, {"kind": "read", "mode": "history"})
        joined = "\n".join(out["lines"])
        assert joined.index("A-two") < joined.index("echo B-one")


async def test_the_log_cap_holds_on_the_host_and_in_the_mirror(
    tether_home: Path, remote: RemoteHosts
) -> None:
    cap = 1024 * 1024
    remote.extra_config = f"[sessions]\nlog_max_bytes = {cap}\n"
    box = remote.add("box-a")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        out = await run(client, shell, "seq 1 600000", wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert out["exitCode"] == 0
        host_log = box.home / "logs" / f"{shell}.log"
        mirror = tether_home / "hosts" / "box-a" / "logs" / f"{shell}.log"
        with anyio.fail_after(HANG_S):  # the host's copy is punched after the mirror has the bytes
            while host_log.stat().st_blocks * 512 > 2 * cap or mirror.stat().st_blocks * 512 > 2 * cap:
                await anyio.sleep(0.02)
        assert host_log.stat().st_size > 4 * cap and mirror.stat().st_size > 4 * cap  # offsets stay
        out = await read(client, shell, {"kind": "read", "mode": "history"}, output={"lines": 2000})
        numbers = [int(x) for x in out["lines"] if x.isdigit()]
        assert numbers[-1] == 600000 and numbers == list(range(numbers[0], 600001)) and len(numbers) >= 1998


async def test_a_remote_run_that_replaces_bash_ends_its_wait_saying_so(
    tether_home: Path, remote: RemoteHosts
) -> None:
    remote.add("box-a")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        assert (await run(client, shell, "echo ready"))["exitCode"] == 0
        out = await run(client, shell, "exec sh", wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert out["met"] is False and out["unmet"] == "shell replaced by sh", out
