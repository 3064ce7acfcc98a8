"""The persistent-shell tools through the official MCP client over ``tether mcp`` (stdio)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from shell_harness import call, open_shell, run, shell_client, text_of

from hang import HANG_MS


async def test_run_wait_kinds_and_exit_codes(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="waits", cwd=str(tmp_path))
        assert (await run(client, shell, "true"))["exitCode"] == 0
        # cd and variables persist: the command runs in the shell itself.
        await run(client, shell, "cd /tmp && X=42")
        out = await run(client, shell, "echo $X $PWD")
        assert out["lines"] == ["42 /tmp"]
        # A code mismatch is reported at once, as not met.
        out = await run(client, shell, "(exit 4)", wait={"kind": "exit", "code": 0})
        assert out["exitCode"] == 4 and out["met"] is False
        assert any("exit=4 ≠ expected 0" in line for line in out["lines"])
        # Trailing comment and heredoc keep exact codes.
        assert (await run(client, shell, "(exit 5) # a comment"))["exitCode"] == 5
        out = await run(client, shell, "cat <<'EOF'\nline one\nEOF\n(exit 6)")
        assert out["exitCode"] == 6 and out["lines"] == ["line one"]
        # idle (default wait)
        out = await run(client, shell, "echo idle-done", wait={"kind": "idle"})
        assert out["met"] is True and out["lines"] == ["idle-done"]
        # match only sees output after the command starts (its echo does not count)
        out = await run(
            client, shell, "sleep 0.2; echo READY-1", wait={"kind": "match", "pattern": "READY-\\d"}
        )
        assert out["met"] is True
        # bell
        out = await run(client, shell, "sleep 0.1; printf '\\a'", wait={"kind": "bell"})
        assert out["met"] is True
        # file
        target = tmp_path / "made.txt"
        out = await run(
            client, shell, f"sleep 0.2; touch {target}", wait={"kind": "file", "path": str(target)}
        )
        assert out["met"] is True and target.exists()
        # noproc and cpu
        out = await run(client, shell, "sleep 0.3", wait={"kind": "noproc", "proc": "sleep", "pollMs": 20})
        assert out["met"] is True
        out = await run(client, shell, "sleep 0.3", wait={"kind": "cpu", "threshold": 50, "pollMs": 20})
        assert out["met"] is True
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {"target": {"sessions": shell}, "action": {"kind": "read"}, "wait": {"kind": "idle"}}
                ]
            },
        )
        assert data["tasks"][0]["met"] is True
        # A timeout reports and never kills: the command is still running afterwards. It ends
        # when the test says so (the fifo), not after a time the test must beat.
        gate = tmp_path / "gate"
        os.mkfifo(gate)
        out = await run(client, shell, f"cat {gate} >/dev/null", wait={"kind": "exit", "timeoutMs": 200})
        assert out["met"] is False and out["exitCode"] is None, out["error"]
        text, data = await call(client, "shell_state", {"sessions": shell, "fg": "cat"})
        assert data["shells"] and data["shells"][0]["fg"] == "cat", text
        gate.write_text("go\n")
        # exit bound to a runId from shell_read
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read"},
                        "wait": {"kind": "exit", "runId": out["runId"], "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0 and data["tasks"][0]["met"] is True


async def test_async_run_then_read_since_and_exit(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        first = await run(
            client, shell, "for i in 1 2 3; do echo n$i; sleep 0.1; done; (exit 9)", wait={"kind": "none"}
        )
        assert first["runId"] and first["exitCode"] is None
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "read", "mode": "since"},
                        "wait": {"kind": "exit", "runId": first["runId"]},
                    }
                ]
            },
        )
        task = data["tasks"][0]
        assert task["exitCode"] == 9
        assert [x for x in task["lines"] if x.startswith("n")] == ["n1", "n2", "n3"]
        # nothing new since the last read
        _, data = await call(
            client,
            "shell_read",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", "mode": "since"}}]},
        )
        assert not [x for x in data["tasks"][0]["lines"] if x.startswith("n")]
        # shell_read waits for output that appears after the wait starts: match and bell. The
        # command repeats both until the test is done, so the waits see one whenever they start.
        stop = tmp_path / "stop"
        await run(
            client,
            shell,
            f"until [ -e {stop} ]; do echo LATE-LINE; printf '\\a'; sleep 0.05; done",
            wait={"kind": "none"},
        )
        for wait in ({"kind": "match", "pattern": "^LATE-LINE$"}, {"kind": "bell"}):
            _, data = await call(
                client,
                "shell_read",
                {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read"}, "wait": wait}]},
            )
            assert data["tasks"][0]["met"] is True, (wait, data["tasks"][0])
        stop.touch()


async def test_interactive_programs(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        tgt = {"sessions": shell}

        async def send(text: str, keys: list[str] | None = None, pre: list[str] | None = None) -> list[str]:
            action: dict[str, object] = {"kind": "send", "text": text, "keys": keys or []}
            if pre:
                action["preKeys"] = pre
            _, data = await call(client, "shell_send", {"tasks": [{"target": tgt, "action": action}]})
            lines: list[str] = data["tasks"][0]["lines"]
            return lines

        # Python REPL: start it, wait for its prompt, type into it, leave it.
        out = await run(client, shell, "python3 -q", wait={"kind": "match", "pattern": ">>> "})
        assert out["met"] is True, out
        lines = await send("print(40+2)", ["Enter"])
        assert "42" in lines
        await send("exit()", ["Enter"])
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "read"},
                        "wait": {"kind": "exit", "runId": out["runId"]},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0
        # read -p answered through shell_send
        out = await run(
            client,
            shell,
            "read -p 'Name? ' n; echo hello-$n; [ \"$n\" = bob ]",
            wait={"kind": "match", "pattern": "Name\\? "},
        )
        await send("bob", ["Enter"])
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "read"},
                        "wait": {"kind": "exit", "runId": out["runId"]},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0
        # less and vim, entered and left with keys
        (tmp_path / "f.txt").write_text("\n".join(f"row {i}" for i in range(200)))
        out = await run(
            client, shell, f"less {tmp_path / 'f.txt'}", wait={"kind": "match", "pattern": "row 1"}
        )
        await send("", ["q"])
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "read"},
                        "wait": {"kind": "exit", "runId": out["runId"]},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0
        out = await run(client, shell, f"vim -u NONE {tmp_path / 'v.txt'}", wait={"kind": "none"})
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {"target": tgt, "action": {"kind": "read"}, "wait": {"kind": "foreground", "proc": "vim"}}
                ]
            },
        )
        assert data["tasks"][0]["met"] is True
        await send("ihello from vim", ["Escape"])
        await send(":wq", ["Enter"])
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "read"},
                        "wait": {"kind": "exit", "runId": out["runId"]},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 0
        assert (tmp_path / "v.txt").read_text() == "hello from vim\n"
        # C-c stops sleep 1000 and the run reports 130
        # (What would run after the sleep leaves a file, not a line: a long prompt can wrap the
        # echoed command line anywhere, so its words prove nothing.)
        never = tmp_path / "never"
        out = await run(client, shell, f"sleep 1000; touch {never}", wait={"kind": "none"})
        await send("", ["C-c"])
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "read", "mode": "tail"},
                        "wait": {"kind": "exit", "runId": out["runId"], "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        assert data["tasks"][0]["exitCode"] == 130
        assert not never.exists()
        # The user's own PS1 / PROMPT_COMMAND, then exec bash: codes stay exact.
        await run(client, shell, "PS1='custom> '; PROMPT_COMMAND='true'")
        assert (await run(client, shell, "(exit 17)"))["exitCode"] == 17
        out = await run(client, shell, "exec bash")
        assert out["exitCode"] == 0
        assert (await run(client, shell, "(exit 18)"))["exitCode"] == 18


async def test_read_modes_and_search(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        tgt = {"sessions": shell}
        await run(client, shell, "seq 1 3000")

        async def read(action: dict[str, object], **task: object) -> dict[str, object]:
            _, data = await call(
                client,
                "shell_read",
                {"tasks": [{"target": tgt, "action": {"kind": "read", **action}, **task}]},
            )
            result: dict[str, object] = data["tasks"][0]
            return result

        tail = await read({"mode": "tail"}, output={"lines": 5})
        assert len(tail["lines"]) == 5 and "3000" in tail["lines"]  # type: ignore[operator]
        screen = await read({"mode": "screen"})
        assert "3000" in screen["lines"]  # type: ignore[operator]
        hist = await read({"mode": "history"})
        lines = hist["lines"]
        assert isinstance(lines, list) and "earlier lines not shown" in lines[0] and "3000" in lines
        assert len(lines) == 21 and isinstance(hist["before"], int)  # output.lines (20) + the note
        summary = await read({"mode": "summary"})
        assert isinstance(summary["lines"], list) and summary["lines"][-1].endswith("lines total]")
        found = await read({"search": "^29\\d\\d$", "context": 1}, output={"lines": 10})
        text = found["lines"]
        assert isinstance(text, list) and text[0].startswith(
            "100 matches, 10 on this page, from 0; next: matchOffset=10"
        )
        page2 = await read({"search": "^29\\d\\d$", "matchOffset": 95}, output={"lines": 10})
        assert isinstance(page2["lines"], list) and page2["lines"][0].startswith(
            "100 matches, 5 on this page, from 95; no more"
        )
        echoed = await read({"search": "seq 1 3000"})  # the echoed command appears once in the log
        assert isinstance(echoed["lines"], list) and echoed["lines"][0].startswith("1 matches"), echoed
        await read({"mode": "diff"})
        same = await read({"mode": "diff", "ifChanged": True})
        assert same["lines"] == ["unchanged"]
        await run(client, shell, "echo changed-now")
        diff = await read({"mode": "diff"})
        assert any(str(x).startswith("+") and "changed-now" in str(x) for x in diff["lines"])  # type: ignore[attr-defined]


async def test_validation_errors(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        a = await open_shell(client)
        b = await open_shell(client)
        cases = [
            ("shell_run", {"tasks": [{"action": {"kind": "run", "command": "true"}}]}, "ambiguous"),
            (
                "shell_run",
                {"tasks": [{"target": {"sessions": "*"}, "action": {"kind": "run", "command": "true"}}]},
                "not allowed",
            ),
            (
                "shell_run",
                {
                    "tasks": [
                        {"target": {"sessions": a}, "action": {"kind": "run", "command": "true"}},
                        {"target": {"sessions": a}, "action": {"kind": "run", "command": "true"}},
                    ]
                },
                "only once",
            ),
            (
                "shell_send",
                {"tasks": [{"target": {"sessions": a}, "action": {"kind": "send", "text": "a\nb"}}]},
                "newline",
            ),
            ("shell_run", {"tasks": [{"target": {"sessions": a}, "action": {"kind": "run"}}]}, "command"),
            ("shell_run", {"session": a}, "tasks"),
            (
                "shell_read",
                {"tasks": [{"target": {"sessions": "dsh-zzzzzz"}, "action": {"kind": "read"}}]},
                "no live shell",
            ),
            # Names the kernel refuses, or a user with no home: not a directory, not a crash.
            *(
                ("shell_open", {"tasks": [{"action": {"kind": "open", "cwd": cwd}}]}, "is not a directory")
                for cwd in ("d" * 5000, "~nosuchuser/x")
            ),
        ]
        for tool, args, needle in cases:
            result = await client.call_tool(tool, args)
            assert needle in text_of(result), (tool, args, text_of(result))
        # maxSessions pre-check rejects the whole batch
        result = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", "count": 7}}]})
        assert result.is_error and "maxSessions" in text_of(result)
        _, data = await call(client, "shell_state", {})
        assert {r["shell"] for r in data["shells"]} == {a, b}


async def test_restart_keeps_shells_and_other_conversations(tether_home: Path) -> None:
    async with shell_client(tether_home, "conv-one") as client:
        shell = await open_shell(client, label="keep")
        await run(client, shell, "Y=persisted")
    async with shell_client(tether_home, "conv-one") as client:
        out = await run(client, shell, "echo $Y")  # explicit id
        assert out["lines"] == ["persisted"]
        _, data = await call(
            client,
            "shell_run",
            {"tasks": [{"action": {"kind": "run", "command": "echo mine-ok"}, "wait": {"kind": "exit"}}]},
        )
        assert data["tasks"][0]["shell"] == shell and data["tasks"][0]["lines"] == ["mine-ok"]
    async with shell_client(tether_home, "conv-two") as client:
        _, data = await call(client, "shell_state", {"scope": "*"})
        assert data["shells"][0]["owner"] == "others"
        _, data = await call(
            client,
            "shell_state",
            {"scope": "*", "owner": "others", "state": "idle,unlocked", "withGit": True, "verbose": True},
        )
        assert (
            [r["shell"] for r in data["shells"]] == [shell]
            and data["diagnostics"]["liveShells"] == 1
            and data["diagnostics"]["tmuxVersion"].startswith("3")
        )
        _, data = await call(client, "shell_state", {})
        assert data["shells"] == []


async def test_thousand_random_exit_codes(tether_home: Path) -> None:
    rng = random.Random(1234)
    async with shell_client(tether_home) as client:
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "count": 8}}]})
        shells = [t["shell"] for t in data["tasks"]]
        done = 0
        while done < 1000:
            codes = [rng.randrange(256) for _ in shells]
            tasks = [
                {
                    "target": {"sessions": s},
                    "action": {"kind": "run", "command": f"(exit {c})"},
                    "wait": {"kind": "exit"},
                }
                for s, c in zip(shells, codes, strict=True)
            ]
            _, data = await call(client, "shell_run", {"tasks": tasks, "concurrency": 8})
            assert [t["exitCode"] for t in data["tasks"]] == codes
            done += len(codes)


async def test_hundred_megabytes_history_and_search(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        n = 12_500_000  # seq 1..n prints ~100 MB
        out = await run(
            client,
            shell,
            f"seq 1 {n}",
            wait={"kind": "exit", "timeoutMs": HANG_MS},
            output={"showing": "summary"},
        )
        assert out["exitCode"] == 0 and out["lines"][-1] == f"[{n} lines total]"
        assert (tether_home / "logs" / f"{shell}.log").stat().st_size > 100_000_000
        _, data = await call(
            client,
            "shell_read",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", "mode": "history"}}]},
        )
        task = data["tasks"][0]
        lines = task["lines"]
        # output.lines (20): the last numbers and the prompt after them, behind the paging note.
        assert len(lines) == 21 and "earlier lines not shown" in lines[0] and task["before"] > 100_000_000
        numbers = [int(x) for x in lines[1:] if x.isdigit()]
        assert numbers == list(range(n - len(numbers) + 1, n + 1)) and len(numbers) >= 18, lines
        last_shown = numbers[0]
        # The page before, 2000 lines, ends exactly where this one began.
        task_ = {"kind": "read", "mode": "history", "before": task["before"]}
        _, data = await call(
            client,
            "shell_read",
            {"tasks": [{"target": {"sessions": shell}, "action": task_, "output": {"lines": 2000}}]},
        )
        assert data["tasks"][0]["lines"][1:] == [str(k) for k in range(last_shown - 2000, last_shown)]
        _, data = await call(
            client,
            "shell_read",
            {
                "tasks": [{"target": {"sessions": shell}, "action": {"kind": "read", "search": "1234567"}}],
            },
        )
        head = data["tasks"][0]["lines"][0]
        # 1234567, 1234567x (10 numbers) and 11234567: exactly 12 lines contain it
        assert head.startswith("12 matches"), head


async def test_killed_server_leaves_no_client_and_a_new_one_finds_mine(tether_home: Path) -> None:
    import os
    import signal

    import anyio
    import psutil

    from tether.process.tree import reap_adopted

    def cmdline(proc: psutil.Process) -> list[str]:
        # Other tests' ended processes (zombies, or gone since the scan) have no command line.
        try:
            return proc.cmdline()
        except psutil.NoSuchProcess:  # ZombieProcess is one
            return []

    def running(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # collected by whoever it was handed to
            return False

    def holders(proc: psutil.Process) -> str:
        # What a hang needs to be understood: the client's state, and every process that still
        # holds the pipe on its stdin (its EOF comes only once no one does).
        try:
            stdin = os.readlink(f"/proc/{proc.pid}/fd/0")
            state = f"{proc.pid} {proc.status()} {cmdline(proc)} stdin {stdin}"
        except (OSError, psutil.NoSuchProcess):
            return f"{proc.pid} gone"
        others = [
            f"{fd_dir.parent.name} {_read_or_empty(fd_dir.parent / 'cmdline')[:80]!r}"
            for fd_dir in Path("/proc").glob("[0-9]*/fd")
            if fd_dir.parent.name != str(proc.pid) and stdin in _links(fd_dir)
        ]
        return f"{state}, also held by {others}"

    me = psutil.Process()
    reached = False
    failure: BaseException | None = None
    controls: list[psutil.Process] = []
    try:
        async with shell_client(tether_home, "conv-killed") as client:
            shell = await open_shell(client, label="survivor")
            await run(client, shell, "Z=still-here")
            servers = [p for p in me.children(recursive=True) if "mcp" in cmdline(p)]
            assert servers, "the stdio server process was not found"
            controls = [c for s in servers for c in s.children(recursive=True) if "-C" in cmdline(c)]
            assert controls, "the tmux control client was not found"
            for proc in servers:
                os.kill(proc.pid, signal.SIGKILL)
            # The control client sees EOF on its stdin and exits: milliseconds, seconds when busy.
            with anyio.fail_after(60):
                while any(running(c) for c in controls):
                    await anyio.sleep(0.02)
            for c in controls:  # orphaned by the kill, it was handed to us (the subreaper): collect it
                reap_adopted(c.pid)
            reached = True
    except Exception as exc:  # the client's own exit fails (its server was killed): expected after
        failure = exc
    # Everything up to the control client's exit must have run.
    assert reached, f"{failure!r}; control clients: {[holders(c) for c in controls]}"
    async with shell_client(tether_home, "conv-killed") as client:
        _, data = await call(
            client,
            "shell_run",
            {"tasks": [{"action": {"kind": "run", "command": "echo $Z"}, "wait": {"kind": "exit"}}]},
        )
        assert data["tasks"][0]["shell"] == shell and data["tasks"][0]["lines"] == ["still-here"]


async def test_a_killed_server_takes_its_control_client_along_while_tmux_cannot_answer(
    tether_home: Path,
) -> None:
    # tmux holds a control client's stdin and ends the client once it reads the EOF there, and a
    # client told to end asks tmux first: with the tmux server stopped, only the kernel can end it.
    import signal

    import anyio
    import psutil

    from tether.process.tree import reap_adopted

    def cmdline(proc: psutil.Process) -> list[str]:
        try:
            return proc.cmdline()
        except psutil.NoSuchProcess:
            return []

    def running(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    me = psutil.Process()
    sock = str(tether_home / "tmux.sock")
    ended = False
    failure: BaseException | None = None
    tmux_server = 0
    try:
        async with shell_client(tether_home, "conv-stopped-tmux") as client:
            await open_shell(client, label="held")
            servers = [p for p in me.children(recursive=True) if "mcp" in cmdline(p)]
            controls = [c for s in servers for c in s.children(recursive=True) if "-C" in cmdline(c)]
            assert servers and controls, (servers, controls)
            found = await anyio.run_process(["tmux", "-S", sock, "display", "-p", "#{pid}"])
            tmux_server = int(found.stdout)
            os.kill(tmux_server, signal.SIGSTOP)
            try:
                for proc in servers:
                    os.kill(proc.pid, signal.SIGKILL)
                with anyio.fail_after(60):  # a hang guard: the kernel ends it at once
                    while any(running(c) for c in controls):
                        await anyio.sleep(0.02)
                ended = True
            finally:
                os.kill(tmux_server, signal.SIGCONT)
            for c in controls:
                reap_adopted(c.pid)
    except Exception as exc:  # the client's own exit fails (its server was killed): expected after
        failure = exc
    assert ended, f"the control client outlived its server while tmux was stopped: {failure!r}"
    await anyio.run_process(["tmux", "-S", sock, "kill-server"], check=False)


async def test_every_validation_error_reaches_the_model(tether_home: Path) -> None:
    a = "dsh-aaaaaa"
    t = {"sessions": a}
    run_ = {"kind": "run", "command": "x"}
    cases = [
        (
            "shell_run",
            {"tasks": [{"target": t, "action": {**run_, "text": "y"}}]},
            "allowed for kind=run: kind, command",
        ),
        (
            "shell_read",
            {"tasks": [{"target": t, "action": {"kind": "read"}, "wait": {"kind": "file", "path": "/x"}}]},
            "shell_read waits for idle, bell, match, exit, foreground",
        ),
        (
            "shell_run",
            {"tasks": [{"target": t, "action": run_, "wait": {"kind": "match", "pattern": "("}}]},
            "invalid regular expression",
        ),
        (
            "shell_run",
            {"tasks": [{"target": t, "action": run_, "wait": {"kind": "exit", "timeoutMs": -5}}]},
            "tasks[0].wait.timeoutMs: must be an integer of at least 0 (ms)",
        ),
        (
            "shell_read",
            {"tasks": [{"target": t, "action": {"kind": "read"}, "wait": {"kind": "exit", "code": 300}}]},
            "from 0 to 255",
        ),
        (
            "shell_send",
            {"tasks": [{"target": t, "action": {"kind": "send", "text": "", "keys": ["Ctrl-C"]}}]},
            "did you mean C-c",
        ),
        (
            "shell_run",
            {"tasks": [{"target": t, "action": run_, "safety": {"bypassGuard": True}}]},
            "required, and not blank, when bypassGuard",
        ),
        ("shell_run", {"tasks": [{"target": t}]}, "tasks[0].action: required"),
        (
            "shell_run",
            {"tasks": [{"target": {"sessions": f"dsh-{i:06d}"}, "action": run_} for i in range(17)]},
            "1 to 16 tasks",
        ),
        (
            "shell_open",
            {"tasks": [{"target": t, "action": {"kind": "open"}}]},
            "does not take the target block",
        ),
        (
            "shell_read",
            {"tasks": [{"target": t, "action": {"kind": "read"}, "output": {"showing": "tail"}}]},
            "showing and structured are shell_run only",
        ),
        (
            "shell_run",
            {"tasks": [{"target": t, "action": {"kind": "send", "text": "x"}}]},
            "'send' is a kind of shell_send",
        ),
        ("shell_state", {"state": "sleepy"}, "'sleepy' is not a state"),
    ]
    async with shell_client(tether_home) as client:
        for tool, args, needle in cases:
            result = await client.call_tool(tool, args)
            assert result.is_error and needle in text_of(result), (tool, text_of(result))


def _links(fd_dir: Path) -> set[str]:
    """What a process's descriptors point at (those that close meanwhile are left out)."""
    found: set[str] = set()
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return found
    for fd in fds:
        try:
            found.add(os.readlink(fd))
        except OSError:
            continue
    return found


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


async def test_an_unmet_wait_says_why_not_timeout(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        # Another exit status than the one expected: known at once, and said so.
        text, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "run", "command": "(exit 4)"},
                        "wait": {"kind": "exit", "code": 0, "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        task = data["tasks"][0]
        assert " · exit=4 · wait exit: unmet (exit=4 ≠ expected 0) · " in text.splitlines()[1], text
        assert task["met"] is False and task["exitCode"] == 4 and task["unmet"] == "exit=4 ≠ expected 0", task
        # A real timeout is still one.
        text, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": await open_shell(client)},
                        "action": {"kind": "run", "command": "sleep 0.5"},
                        "wait": {"kind": "exit", "timeoutMs": 50},
                    }
                ]
            },
        )
        assert data["tasks"][0]["unmet"] == "timeout" and " · wait exit: timeout · " in text, text
        # The shell ends under the wait.
        text, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "run", "command": "sleep 0.6; exit 3"},
                        "wait": {"kind": "exit", "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        task = data["tasks"][0]
        assert task["met"] is False and task["unmet"] == "shell ended", (task["error"], task)
        assert " · wait exit: unmet (shell ended) · " in text.splitlines()[1], text
        # Plain text says it too.
        text, _ = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": await open_shell(client)},
                        "action": {"kind": "run", "command": "(exit 4)"},
                        "wait": {"kind": "exit", "code": 0, "timeoutMs": HANG_MS},
                        "output": {"structured": False},
                    }
                ]
            },
        )
        assert text.splitlines()[-1].endswith(" wait exit unmet: exit=4 ≠ expected 0]"), text
        # Steps too: the step that was not met says why.
        text, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": await open_shell(client)},
                        "action": {
                            "kind": "steps",
                            "steps": [{"send": "sleep 0.3; exit 3", "expect": "idle"}],
                        },
                        "wait": {"kind": "idle", "timeoutMs": HANG_MS},
                    }
                ]
            },
        )
        assert data["tasks"][0]["unmet"] == "shell ended", data
        assert " · wait steps: unmet (shell ended) · " in text.splitlines()[1], text
