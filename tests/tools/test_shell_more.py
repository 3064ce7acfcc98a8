"""More of the persistent-shell tools over MCP: steps, retry, dry runs, output shapes, literal
input, copy mode, the end of a shell, refusals, and the user-busy / attached / ai-busy states."""

from __future__ import annotations

import os
import pty
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
from shell_harness import call, open_shell, run, shell_client, text_of

from hang import HANG_S


def _tmux(home: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), *args], capture_output=True, text=True, check=True
    ).stdout


async def _read(client: Any, shell: str, action: dict[str, Any] | None = None, **task: Any) -> dict[str, Any]:
    args = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", **(action or {})}, **task}]}
    _, data = await call(client, "shell_read", args)
    out: dict[str, Any] = data["tasks"][0]
    return out


async def test_steps_retry_and_dryrun(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        tgt = {"sessions": shell}
        steps = [
            {"label": "start", "send": "python3 -q", "expect": {"kind": "match", "pattern": ">>> "}},
            {"send": "print('st' + 'eps')", "expect": {"kind": "match", "pattern": "^steps$"}},
            {"send": "exit()", "expect": {"kind": "idle"}},
        ]
        _, data = await call(
            client, "shell_run", {"tasks": [{"target": tgt, "action": {"kind": "steps", "steps": steps}}]}
        )
        task = data["tasks"][0]
        assert task["met"] is True and "steps" in task["lines"], task["lines"]
        # A failing step stops the sequence and says so.
        bad = [
            {"send": "echo one", "expect": {"kind": "match", "pattern": "never-printed"}, "timeoutMs": 300},
            {"send": "touch should-not-exist"},
        ]
        _, data = await call(
            client, "shell_run", {"tasks": [{"target": tgt, "action": {"kind": "steps", "steps": bad}}]}
        )
        assert data["tasks"][0]["met"] is False
        # retry last / last-failed
        counter = tmp_path / "count"
        first = await run(client, shell, f"echo x >> {counter}; (exit 3)")
        assert first["exitCode"] == 3
        _, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "retry", "mode": "last-failed"},
                        "wait": {"kind": "exit"},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 3 and counter.read_text() == "x\nx\n"
        await run(client, shell, "true")
        text, data = await call(
            client,
            "shell_run",
            {"tasks": [{"target": tgt, "action": {"kind": "retry", "mode": "last-failed"}}]},
        )
        assert "nothing retried" in text
        _, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {"target": tgt, "action": {"kind": "retry", "mode": "last"}, "wait": {"kind": "exit"}}
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0
        # dry run types nothing
        marker = tmp_path / "dry"
        text, _ = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "run", "command": f"touch {marker}"},
                        "safety": {"dryrun": True},
                    }
                ]
            },
        )
        assert "[dryrun] would run" in text and not marker.exists()


async def test_output_shapes_literal_input_and_copy_mode(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cols=100, rows=20)
        tgt = {"sessions": shell}
        tricky = "a'b\"c $HOME ~ ;x; \\#{pane_id} é ✓"
        out = await run(client, shell, f"printf '%s\\n' {repr_sh(tricky)}")
        assert out["lines"] == [tricky], out
        long = "z" * 5000
        out = await run(client, shell, f"echo {long} | wc -c")
        assert out["lines"] == ["5001"]
        out = await run(client, shell, "seq 1 50", output={"showing": "summary", "lines": 3})
        assert out["lines"] == ["48", "49", "50", "[50 lines total]"]
        out = await run(client, shell, "seq 1 50", output={"showing": "tail", "lines": 3})
        assert len(out["lines"]) == 3
        out = await run(client, shell, "echo on-screen", output={"showing": "screen"})
        assert "on-screen" in out["lines"]
        await run(client, shell, "clear", output={"showing": "diff"})
        out = await run(client, shell, "echo diffed", output={"showing": "diff"})
        assert any(x.startswith("+") and "diffed" in x for x in out["lines"]), out
        result = await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "run", "command": "echo plain; (exit 2)"},
                        "wait": {"kind": "exit"},
                        "output": {"structured": False},
                    }
                ]
            },
        )
        assert text_of(result).splitlines() == ["plain", f"[{shell} exit=2]"]
        # copy mode is left before typing
        _tmux(tether_home, "copy-mode", "-t", shell)
        assert _tmux(tether_home, "display", "-p", "-t", shell, "#{pane_in_mode}").strip() == "1"
        assert (await run(client, shell, "(exit 11)"))["exitCode"] == 11
        # preKeys clear a half-typed line before the text
        _, data = await call(
            client,
            "shell_send",
            {"tasks": [{"target": tgt, "action": {"kind": "send", "text": "echo half"}}]},
        )
        _, data = await call(
            client,
            "shell_send",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {
                            "kind": "send",
                            "text": "echo whole",
                            "keys": ["Enter"],
                            "preKeys": ["C-u"],
                        },
                    }
                ]
            },
        )
        assert "whole" in data["tasks"][0]["lines"] and not any(
            "halfecho" in x for x in data["tasks"][0]["lines"]
        )
        # concurrency above 8 is clamped and said
        text, _ = await call(
            client, "shell_read", {"tasks": [{"target": tgt, "action": {"kind": "read"}}], "concurrency": 12}
        )
        assert "concurrency 12 clamped to 8" in text


def repr_sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


async def test_refusals_and_the_end_of_a_shell(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="end")
        tgt = {"sessions": shell}
        result = await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "run", "command": "echo a \\"},
                        "wait": {"kind": "exit"},
                    }
                ]
            },
        )
        assert "cannot wait for exit" in text_of(result) and "continuation" in text_of(result)
        out = await run(client, shell, "python3 -q", wait={"kind": "match", "pattern": ">>> "})
        result = await client.call_tool(
            "shell_run",
            {
                "tasks": [
                    {"target": tgt, "action": {"kind": "run", "command": "1+1"}, "wait": {"kind": "exit"}}
                ]
            },
        )
        assert "runs in front of shell" in text_of(result)
        # without an exit wait the text goes to the program in front
        _, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "run", "command": "print(7*6)"},
                        "wait": {"kind": "match", "pattern": "42"},
                    }
                ]
            },
        )
        assert data["tasks"][0]["met"] is True
        await call(
            client,
            "shell_send",
            {"tasks": [{"target": tgt, "action": {"kind": "send", "text": "", "keys": ["C-d"]}}]},
        )
        done = await _read(client, shell, wait={"kind": "exit"})  # the latest run: plain input
        assert "typed as input to python3" in (done["error"] or "")
        done = await _read(client, shell, wait={"kind": "exit", "runId": out["runId"]})
        assert done["exitCode"] == 0
        result = await client.call_tool(
            "shell_open", {"tasks": [{"action": {"kind": "open", "from": "dsh-aaaaaa"}}]}
        )
        assert "no snapshot of dsh-aaaaaa" in text_of(result)
        # `exit` ends the shell itself
        out = await run(client, shell, "exit 0")
        assert out["met"] is False and any("the shell ended with exit status 0" in x for x in out["lines"])
        assert out["exitCode"] == 0
        _, data = await call(client, "shell_state", {"scope": "*"})
        assert shell not in [r["shell"] for r in data["shells"]]


async def test_labels_filters_and_human_states(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        _, data = await call(
            client,
            "shell_open",
            {"tasks": [{"action": {"kind": "open", "count": 2, "label": "web", "cwd": str(tmp_path)}}]},
        )
        a, b = (t["shell"] for t in data["tasks"])
        _, data = await call(client, "shell_state", {"label": "web-2"})
        assert [r["shell"] for r in data["shells"]] == [b]
        with anyio.fail_after(HANG_S):  # idle = the shell reads its next line, nothing typed pending
            while True:
                _, data = await call(client, "shell_state", {"cwd": tmp_path.name, "state": "idle"})
                if len(data["shells"]) == 2:
                    break
                await anyio.sleep(0.05)
        assert {r["shell"] for r in data["shells"]} == {a, b}
        # the panel's stamp makes a shell user-busy
        _tmux(tether_home, "set-option", "-t", a, "@tether_user_input_at", str(int(time.time() * 1000)))
        _, data = await call(client, "shell_state", {"state": "user-busy"})
        assert [r["shell"] for r in data["shells"]] == [a]
        # a real terminal client attached to b: attached, and user-busy once a person types
        master, slave = pty.openpty()
        env = {**os.environ, "TERM": "xterm"}
        attach = subprocess.Popen(  # noqa: ASYNC220 - a real terminal client, reaped below
            ["tmux", "-S", str(tether_home / "tmux.sock"), "attach", "-t", b],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        try:
            with anyio.fail_after(HANG_S):
                while True:
                    _, data = await call(client, "shell_state", {"state": "attached"})
                    if data["shells"]:
                        break
                    await anyio.sleep(0.05)
            assert [r["shell"] for r in data["shells"]] == [b]
            # A client's own attach (and its terminal's replies within the first second) is not a
            # person typing; the rule is about wall-clock seconds, so let two of them pass.
            _, data = await call(client, "shell_state", {"sessions": b, "state": "user-busy"})
            assert data["shells"] == []
            await anyio.sleep(2.1)
            os.write(master, b"echo typed-by-a-person\r")
            with anyio.fail_after(HANG_S):
                while True:
                    _, data = await call(client, "shell_state", {"sessions": b, "state": "user-busy"})
                    if data["shells"]:
                        break
                    await anyio.sleep(0.05)
        finally:
            attach.terminate()
            attach.wait(HANG_S)
            os.close(master)
            os.close(slave)
        # ai-busy while this conversation's call runs on the shell (the person's stamp on a is
        # cleared first: while a person types there, agent writes are refused)
        _tmux(tether_home, "set-option", "-t", a, "@tether_user_input_at", "0")
        # The command runs until the test has seen the states (the fifo), however slowly it looks.
        gate = tmp_path / "busy-gate"
        os.mkfifo(gate)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, client, a, f"cat {gate} >/dev/null")
            while True:
                _, data = await call(client, "shell_state", {"state": "ai-busy"})
                # ai-busy starts with the call (before its safety checks); busy once it typed
                if data["shells"] and "busy" in data["shells"][0]["states"]:
                    break
                await anyio.sleep(0.05)
            assert data["shells"][0]["shell"] == a and "busy" in data["shells"][0]["states"]
            await anyio.to_thread.run_sync(gate.write_text, "go\n")  # the run ends; the group too


async def test_a_megabyte_of_text_then_enter_runs(tether_home: Path) -> None:
    # shell_send types its text at the cursor and asks the guard's reporter for the line before
    # Enter. The reporter was allowed 5 s whatever came before it; bash reads the text typed
    # before it unbuffered (and, with the cursor put at the end by number, spent 16 s on its
    # place): a megabyte of text then Enter was refused, nothing run, the shell busy half a minute.
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        word = "a" * 1_000_000
        send = {"kind": "send", "text": f"echo {word} | wc -c", "keys": ["Enter"]}
        text, data = await call(
            client, "shell_send", {"tasks": [{"target": {"sessions": shell}, "action": send}]}
        )
        assert data["tasks"][0]["ok"] is True, text[:2000]
        done = await _read(client, shell, wait={"kind": "idle"})
        assert done["met"] is True and "1000001" in done["lines"], str(done)[-3000:]
