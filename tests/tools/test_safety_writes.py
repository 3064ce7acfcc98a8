"""The safety path of shell writes, through the MCP client: locks, a person typing, the guard,
bypass, dry runs, macros, locked vault groups, and one audit record per tool call."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import anyio
from safety_harness import audit_records, macros, manual_locks, task, vault
from shell_harness import TETHER, call, open_shell, run, shell_client, text_of

from hang import HANG_S
from tether.shells import Shells, mark_user_input
from tether.shells.macros.expand import EXIT_WAIT_REFUSAL
from tether.store.macros import MacroView


def _state(data: dict[str, object], shell: str) -> list[str]:
    rows = data["shells"]
    assert isinstance(rows, list)
    return next(r["states"] for r in rows if r["shell"] == shell)


async def test_manual_lock_refuses_at_once_in_both_lock_modes(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        manual_locks(tether_home).lock(shell, who="alice", why="deploying")
        for mode in ("require", "ignore"):
            _, out = await task(
                client,
                "shell_run",
                shell,
                {"kind": "run", "command": "echo should-not-run"},
                safety={"lock": mode},
            )
            assert out["errorCode"] == "REFUSED", out
            assert "locked by alice" in out["error"] and "deploying" in out["error"]
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert "locked" in _state(data, shell)
        _, out = await task(
            client, "shell_send", shell, {"kind": "send", "text": "echo typed", "keys": ["Enter"]}
        )
        assert out["errorCode"] == "REFUSED"
        _, out = await task(client, "shell_read", shell, {"kind": "read", "mode": "history"})
        assert "should-not-run" not in "\n".join(out["lines"]) and "typed" not in "\n".join(out["lines"])
        manual_locks(tether_home).unlock(shell)
        out = await run(client, shell, "echo now-it-runs")
        assert out["exitCode"] == 0 and "now-it-runs" in out["lines"]
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert "unlocked" in _state(data, shell)
    refused = [r for r in audit_records(tether_home) if r["tool"] in ("shell_run", "shell_send")]
    assert [r["outcome"] for r in refused] == ["refused", "refused", "refused", "ok"]
    assert all(r["targets"] == [shell] for r in refused)


async def test_person_typing_refuses_then_the_write_goes_through(
    tether_home: Path, home_shells: Shells
) -> None:
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        await mark_user_input(home_shells, shell)
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert "user-busy" in _state(data, shell)
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "echo agent"})
        assert out["errorCode"] == "REFUSED" and "a person is typing" in out["error"]
        assert "retry in a few seconds" in out["error"].lower()
        # The person stopped (their last keystroke is now older than user_busy_seconds).
        await mark_user_input(home_shells, shell, int(time.time() * 1000) - 60_000)
        out = await run(client, shell, "echo agent")
        assert out["exitCode"] == 0 and "agent" in out["lines"]


def _openers(path: Path) -> set[int]:
    """Processes holding ``path`` open (a lock holder, and a writer waiting for the lock)."""
    pids: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    pids.add(int(pid))
            except OSError:
                continue
    return pids


async def test_two_conversations_racing_on_one_shell_are_serialised(
    tether_home: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    async with shell_client(tether_home, "conv-a") as a, shell_client(tether_home, "conv-b") as b:
        shell = await open_shell(a)
        lock_file = tether_home / "locks" / f"{shell}.lock"
        results: dict[str, dict[str, object]] = {}

        async def first() -> None:
            results["a"] = await run(
                a,
                shell,
                f"echo A-one; until [ -e {go} ]; do sleep 0.05; done; echo A-two",
                wait={"kind": "exit"},
            )

        async def second() -> None:
            results["b"] = await run(b, shell, "echo B-one", wait={"kind": "exit"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            with anyio.fail_after(HANG_S):
                while len(_openers(lock_file)) < 1:  # A holds the shell's write lock
                    await asyncio.sleep(0.02)
            _, data = await call(b, "shell_state", {"sessions": shell})
            assert "locked" in _state(data, shell)  # held by another conversation's write
            tg.start_soon(second)
            with anyio.fail_after(HANG_S):
                while len(_openers(lock_file)) < 2:  # B's server waits on the same lock file
                    await asyncio.sleep(0.02)
            go.touch()
        a_out, b_out = results["a"], results["b"]
        # Without the lock B would have typed into A's running command: not at a prompt, so its
        # wait.kind=exit would be refused. Serialised, B ran at the prompt with its own marker.
        assert a_out["exitCode"] == 0 and a_out["lines"] == ["A-one", "A-two"]
        assert b_out["exitCode"] == 0 and b_out["lines"] == ["B-one"], b_out
        _, out = await task(a, "shell_read", shell, {"kind": "read", "mode": "history"})
        joined = "\n".join(out["lines"])
        assert joined.index("A-two") < joined.index("echo B-one")


async def test_guard_blocks_run_and_send_at_a_shell_but_not_inside_python(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "sudo rm -rf /"})
        assert out["errorCode"] == "BLOCKED"
        assert "rule recursive-delete" in out["error"] and "How to proceed" in out["error"]
        assert "bypassGuard" in out["error"]
        _, out = await task(
            client,
            "shell_send",
            shell,
            {"kind": "send", "text": "git push --force origin main", "keys": ["Enter"]},
        )
        assert out["errorCode"] == "BLOCKED" and "git-force-push" in out["error"]
        # a macro is judged after expansion
        macros(tether_home).set("wipe", "rm -rf ~", view=MacroView(conversation="conv-a"), actor="test")
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "/wipe"})
        assert out["errorCode"] == "BLOCKED"
        # inside python3 the text is not shell code: not judged
        await task(client, "shell_send", shell, {"kind": "send", "text": "python3 -q", "keys": ["Enter"]})
        await task(
            client,
            "shell_read",
            shell,
            {"kind": "read", "mode": "tail"},
            wait={"kind": "foreground", "proc": "python3"},
        )
        _, out = await task(
            client,
            "shell_send",
            shell,
            {"kind": "send", "text": "print('rm -rf /' + ' ok')", "keys": ["Enter"]},
        )
        assert out["ok"], out
        _, out = await task(
            client, "shell_send", shell, {"kind": "send", "text": "rm -rf /", "keys": ["Enter"]}
        )
        assert out["ok"], out  # a SyntaxError in python, harmless
        await task(client, "shell_send", shell, {"kind": "send", "text": "", "keys": ["C-d"]})
    blocked = [r for r in audit_records(tether_home) if r["outcome"] == "blocked"]
    assert len(blocked) == 3 and "recursive-delete" in blocked[0]["detail"]
    assert blocked[2]["command"] == "/wipe" and blocked[2]["extra"]["shown"] == ["rm -rf ~"]


async def test_bypass_needs_a_reason_and_is_audited(tether_home: Path, tmp_path: Path) -> None:
    command = f"cd {tmp_path} && git push --force origin nothing"
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        for reason in ("", "   "):
            result = await client.call_tool(
                "shell_run",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "run", "command": command},
                            "safety": {"bypassGuard": True, "reason": reason},
                        }
                    ]
                },
            )
            assert result.is_error and "reason" in text_of(result)
        _, out = await task(
            client,
            "shell_run",
            shell,
            {"kind": "run", "command": command},
            wait={"kind": "exit"},
            safety={"bypassGuard": True, "reason": "the user asked: force-push it"},
        )
        assert out["exitCode"] not in (None, 0)  # it ran: git says this is not a repository
        assert any("not a git repository" in line for line in out["lines"])
        assert any("guard bypassed: rule git-force-push" in line for line in out["lines"])
    records = [r for r in audit_records(tether_home) if r["tool"] == "shell_run"]
    assert [r["outcome"] for r in records] == ["error", "error", "ok"]
    assert "bypass-guard" in records[-1]["flags"] and records[-1]["reason"] == "the user asked: force-push it"


async def test_dryrun_shows_the_resolved_command_masked_and_sends_nothing(tether_home: Path) -> None:
    secret = "dry-canary-7Q2x"
    vault(tether_home).set("TOKEN", secret)
    macros(tether_home).set(
        "auth", "curl -H 'Bearer {{vault.TOKEN}}' {{1}}", view=MacroView(conversation="conv-a"), actor="t"
    )
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        text, out = await task(
            client,
            "shell_run",
            shell,
            {"kind": "run", "command": "/auth https://x.test"},
            safety={"dryrun": True},
        )
        assert out["lines"][0] == "[dryrun] would run: curl -H 'Bearer [vault:TOKEN]' https://x.test"
        assert secret not in text
        _, out = await task(
            client,
            "shell_send",
            shell,
            {"kind": "send", "text": "echo {{vault.TOKEN}} dry-sent", "keys": ["Enter"]},
            safety={"dryrun": True},
        )
        assert "echo [vault:TOKEN] dry-sent" in out["lines"][0] and secret not in str(out)
        _, out = await task(client, "shell_read", shell, {"kind": "read", "mode": "history"})
        assert not any("curl" in line or "dry-sent" in line for line in out["lines"])
    records = [r for r in audit_records(tether_home) if r["tool"] in ("shell_run", "shell_send")]
    assert [r["outcome"] for r in records] == ["dry-run", "dry-run"]
    assert all("dryrun" in r["flags"] for r in records)
    assert records[0]["command"] == "/auth https://x.test"


async def test_macros_through_shell_run_and_the_exit_wait_refusal(tether_home: Path) -> None:
    macros(tether_home).set("greet", "echo hello-{{1}}", view=MacroView(conversation="conv-a"), actor="t")
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        _, out = await task(
            client, "shell_run", shell, {"kind": "run", "command": "/greet world"}, wait={"kind": "exit"}
        )
        assert out["error"] == EXIT_WAIT_REFUSAL
        _, out = await task(
            client,
            "shell_run",
            shell,
            {"kind": "run", "command": "/greet world"},
            wait={"kind": "match", "pattern": "^hello-world"},
        )
        assert out["ok"] and "hello-world" in out["lines"], out
        # another conversation does not see a conversation-scoped macro: /greet is a path there
    async with shell_client(tether_home, "conv-b") as other:
        _, out = await task(
            other, "shell_run", shell, {"kind": "run", "command": "/greet x"}, wait={"kind": "exit"}
        )
        assert out["exitCode"] == 127


async def test_locked_vault_group_refused_and_force_proceeds_with_the_others(tether_home: Path) -> None:
    v = vault(tether_home)
    v.set("OPEN_ONE", "open-value-5150")
    v.create_group("prod", passphrase="correct horse")
    v.set("PROD_PW", "prod-secret-0451", group="prod", passphrase="correct horse")
    command = "echo got:{{vault.OPEN_ONE}}:{{vault.PROD_PW}}:"
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": command})
        assert out["errorCode"] == "REFUSED" and "locked vault group" in out["error"]
        assert "prod" in out["error"] and "Nothing was sent" in out["error"]
        _, out = await task(
            client,
            "shell_run",
            shell,
            {"kind": "run", "command": command},
            wait={"kind": "exit"},
            safety={"force": True},
        )
        assert out["exitCode"] == 0
        assert "got:[vault:OPEN_ONE]:{{vault.PROD_PW}}:" in out["lines"], out
        assert any("NOT expanded" in line and "PROD_PW" in line for line in out["lines"])
    records = [r for r in audit_records(tether_home) if r["tool"] == "shell_run"]
    assert [r["outcome"] for r in records] == ["refused", "ok"] and "force" in records[1]["flags"]
    assert all(r["command"] == command for r in records)


async def test_one_audit_record_per_tool_call_and_the_chain_verifies(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-a") as client:
        before = len(audit_records(tether_home))
        result = await client.call_tool("bash", {"command": "echo one-shot", "description": "say it"})
        assert "one-shot" in text_of(result)
        shell = await open_shell(client)
        await run(client, shell, "echo x")
        await task(client, "shell_read", shell, {"kind": "read", "mode": "tail"})
        await call(client, "shell_state", {})
        await call(client, "shell_audit", {"tasks": [{"action": {"kind": "audit"}}]})
        bad = await client.call_tool("shell_run", {"tasks": [{"action": {"kind": "nope"}}]})
        assert bad.is_error
        records = audit_records(tether_home)[before:]
    assert [(r["tool"], r["action"]) for r in records] == [
        ("bash", "run"),
        ("shell_open", "open"),
        ("shell_run", "run"),
        ("shell_read", "read"),
        ("shell_state", "state"),
        ("shell_audit", "audit"),
        ("shell_run", "nope"),
    ]
    assert records[0]["command"] == "echo one-shot" and records[0]["actor"] == "conv-a"
    assert records[1]["targets"] == [shell] and records[-1]["outcome"] == "error"
    assert all(r["source"] == "tool" for r in records)
    verify = await anyio.to_thread.run_sync(_verify, tether_home)
    assert verify.returncode == 0 and "intact" in verify.stdout, verify.stdout + verify.stderr


def _verify(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TETHER, "audit", "verify"],
        env={**os.environ, "TETHER_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )


async def test_a_cancelled_write_releases_the_shell_lock_and_is_audited(
    tether_home: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    async with shell_client(tether_home, "conv-a") as a, shell_client(tether_home, "conv-b") as b:
        shell = await open_shell(a)
        lock_file = tether_home / "locks" / f"{shell}.lock"

        async def long_write() -> None:
            await run(a, shell, f"touch {started}; sleep 30", wait={"kind": "exit"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_write)
            with anyio.fail_after(HANG_S):
                while not started.exists():
                    await asyncio.sleep(0.02)
            assert _openers(lock_file)  # A's server holds the write lock during the wait
            tg.cancel_scope.cancel()
        with anyio.fail_after(HANG_S):  # the cancelled call let go of the lock
            while _openers(lock_file):
                await asyncio.sleep(0.02)
        _, out = await task(b, "shell_send", shell, {"kind": "send", "text": "", "keys": ["C-c"]})
        assert out["ok"], out
        out = await run(b, shell, "echo after-cancel")
        assert out["exitCode"] == 0 and out["lines"] == ["after-cancel"]
    mine = [r for r in audit_records(tether_home) if r["tool"] == "shell_run" and r["actor"] == "conv-a"]
    assert [r["outcome"] for r in mine] == ["cancelled"]
    assert mine[0]["extra"]["cause"] == "client-cancelled"  # the official client's notifications/cancelled
