"""Persistent shells on shell integration, through the MCP client: what is typed is exactly the
command, exit statuses come from the shell itself, and each case the audits found behaves."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters
from shell_harness import TETHER, call, open_shell, read, run, send, shell_client, text_of, tmux

from hang import HANG_MS, HANG_S
from tether.audit import query
from tether.config import load_config
from tether.errors import StorageError
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext

TAB_SCRIPT = "cat > {path} <<'EOF'\n\techo hi\na\tb\n\tnot-EOF\nEOF"


async def test_tabs_and_control_bytes_arrive_exactly(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        out = await run(client, shell, TAB_SCRIPT.format(path="small.txt"))
        assert out["exitCode"] == 0, out["error"]
        assert (tmp_path / "small.txt").read_text() == "\techo hi\na\tb\n\tnot-EOF\n"
        # Above the old 2 KB paste threshold: still exact, tabs and all.
        body = "".join(f"\tline {i}\tcol\n" for i in range(400))
        out = await run(client, shell, f"cat > big.txt <<'EOF'\n{body}EOF")
        assert out["exitCode"] == 0 and (tmp_path / "big.txt").read_text() == body
        # printf with a literal tab, control bytes and non-ASCII text.
        text = "a\tb\x01c\x1bd é ✓"
        out = await run(client, shell, f"printf '%s' '{text}' > ctl.bin")
        assert out["exitCode"] == 0 and (tmp_path / "ctl.bin").read_bytes() == text.encode()
        # shell_send text at the prompt is literal too (a tab does not complete), Enter runs it.
        await send(client, shell, "printf '%s' 'x\ty' > sent.txt", ["Enter"])
        out = await read(client, shell, wait={"kind": "idle"})
        assert out["met"] is True
        assert (tmp_path / "sent.txt").read_text() == "x\ty"


async def test_the_loader_keeps_glob_characters_and_the_shells_own_options(
    tether_home: Path, tmp_path: Path
) -> None:
    # The loader splits its payload with globbing off: a field that is a pattern matching a file
    # name (here the whole command) stays as typed, and the shell's noglob and IFS are its own.
    (tmp_path / "echo gl-file").write_text("")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        assert (await run(client, shell, "echo gl*"))["lines"][0] == "gl*"
        assert (await run(client, shell, "[[ $- == *f* ]] && echo on || echo off"))["lines"][0] == "off"
        assert (await run(client, shell, "set -f; IFS=:"))["exitCode"] == 0
        assert (await run(client, shell, "[[ $- == *f* ]] && echo on || echo off"))["lines"][0] == "on"
        assert (await run(client, shell, "printf '[%s]' \"$IFS\""))["lines"][0] == "[:]"


async def test_people_and_history_see_only_the_commands(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        commands = ["echo first", "ls -d /", "echo 'words __tb __te __tp stay'", "true && echo done"]
        for command in commands:
            assert (await run(client, shell, command))["exitCode"] == 0
        out = await run(client, shell, "HISTTIMEFORMAT= history | tail -n 5")
        listed = [line.split(None, 1)[1] for line in out["lines"] if line.strip()[:1].isdigit()]
        assert listed[-5:-1] == commands
        screen = tmux(tether_home, "capture-pane", "-p", "-t", f"={shell}:")
        typed = [
            line.split("# ", 1)[1] for line in screen.splitlines() if "# " in line and line.split("# ", 1)[1]
        ]
        assert typed[: len(commands)] == commands
        assert "words __tb __te __tp stay" in screen
        assert not any(word in screen for word in ("6973", "__tether", "};__te", "__tb echo"))
        env = await run(client, shell, "env")
        names = [line.split("=", 1)[0] for line in env["lines"] if "=" in line]
        ours = sorted(n for n in names if n.startswith("BASH_FUNC") or "tether" in n.lower())
        assert ours == ["TETHER_HOME", "TETHER_SHELL"], ours
        assert "TMUX" not in names and "PROMPT_COMMAND" not in names
        # tmux typed in the shell does not reach tether's server.
        ls = await run(client, shell, "tmux ls 2>&1; true")
        assert not any(shell in line for line in ls["lines"])


async def test_prompt_hooks_are_waited_for(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        assert (await run(client, shell, "PROMPT_COMMAND='sleep 0.4'"))["exitCode"] == 0
        for code in (3, 0, 5):
            out = await run(client, shell, f"(exit {code})")
            assert out["exitCode"] == code and out["met"] is True, out
        # Back to back with wait none: the second waits for the first's prompt hook, then runs.
        await run(client, shell, "true", wait={"kind": "none"})
        out = await run(client, shell, "echo after")
        assert out["exitCode"] == 0 and "after" in out["lines"], out["error"] or out


async def test_a_shell_that_ends_reports_its_status(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        out = await run(client, shell, "echo bye; exit 7", wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert out["exitCode"] == 7 and out["met"] is False, out
        assert any("the shell ended with exit status 7" in line for line in out["lines"]), out
        assert not any("timeout" in line for line in out["lines"])
        shell = await open_shell(client)
        out = await run(client, shell, "set -e; false", wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert out["exitCode"] == 1 and any("exit status 1" in line for line in out["lines"]), out
        # A wait in flight when the session is killed ends with "the shell ended", not a timeout.
        shell = await open_shell(client)
        waiting = asyncio.ensure_future(
            run(client, shell, "sleep 6000", wait={"kind": "exit", "timeoutMs": HANG_MS})
        )
        # The run's own wait is in flight once sleep runs in front (the run typed it).
        seen = await read(client, shell, wait={"kind": "foreground", "proc": "sleep", "timeoutMs": HANG_MS})
        assert seen["met"] is True
        tmux(tether_home, "kill-session", "-t", f"={shell}")
        ended = await waiting
        assert ended["met"] is False and any("the shell ended" in line for line in ended["lines"]), ended
        assert not any("timeout" in line for line in ended["lines"])


async def test_wait_none_into_a_busy_shell_says_where_the_text_went(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        await run(client, shell, "cat", wait={"kind": "none"})
        out = await run(client, shell, "typed line", wait={"kind": "none"})
        assert any("typed as input to cat" in line for line in out["lines"]), out
        refused = await read(client, shell, wait={"kind": "exit", "runId": out["runId"]})
        assert not refused["ok"] and "typed as input to cat" in refused["error"], refused
        await send(client, shell, "", ["C-d"])
        assert (await run(client, shell, "echo back"))["exitCode"] == 0


async def test_open_returns_once_the_shell_reads_its_first_line(tether_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("sleep 0.8\nexport FROM_RC=yes\n")
    async with shell_client(tether_home, extra_env={"HOME": str(home)}) as client:
        shell = await open_shell(client)
        out = await run(client, shell, "echo $FROM_RC")
        assert out["exitCode"] == 0 and "yes" in out["lines"], out


async def test_steps_wait_for_their_own_commands(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        steps = [{"send": f"sleep 0.0{i % 3}; echo S{i}", "expect": {"kind": "idle"}} for i in range(50)]
        _, data = await call(
            client,
            "shell_run",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "steps", "steps": steps}}]},
        )
        lines = data["tasks"][0]["lines"]
        assert data["tasks"][0]["met"] is True
        outputs = [line for line in lines if line.startswith("S")]
        assert outputs == [f"S{i}" for i in range(50)], lines


async def test_cpu_and_noproc_wait_for_the_command_itself(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        script = "import time; time.sleep(0.4); open('p.done', 'w').write('x')"
        out = await run(
            client,
            shell,
            f'python3 -c "{script}"',
            wait={"kind": "noproc", "proc": "python3", "timeoutMs": HANG_MS},
        )
        assert out["met"] is True and (tmp_path / "p.done").exists(), out
        # Busy with a fixed amount of work (however long a loaded machine makes that), then idle: a
        # 1% threshold is met only once the command itself has run and gone quiet. The work is a
        # loop of bash's own (no program to load from disk: a start blocked on I/O reads as idle).
        busy = "bash -c 'for ((i = 0; i < 400000; i++)); do :; done; : > c.done; sleep 3'"
        out = await run(client, shell, busy, wait={"kind": "cpu", "threshold": 1, "timeoutMs": HANG_MS})
        assert out["met"] is True and (tmp_path / "c.done").exists(), out


async def test_a_cpu_wait_counts_a_command_starved_of_cpu_as_busy(tether_home: Path, tmp_path: Path) -> None:
    # A command that works but gets almost no CPU (SCHED_IDLE, on a CPU a busy loop holds) spent
    # no 10 ms tick between two samples, so its CPU read 0 % and the wait was met while it still
    # worked: on a loaded machine any command can be starved so. It wants the CPU all the same.
    done = tmp_path / "c.done"
    hog = await anyio.open_process(["taskset", "-c", "0", "bash", "-c", f"while [ ! -e {done} ]; do :; done"])
    try:
        async with shell_client(tether_home) as client:
            shell = await open_shell(client, cwd=str(tmp_path))
            loop = "for ((i = 0; i < 30000; i++)); do :; done; : > c.done; sleep 3"
            starved = f"taskset -c 0 chrt -i 0 bash -c '{loop}'"
            wait = {"kind": "cpu", "threshold": 1, "timeoutMs": HANG_MS}
            out = await run(client, shell, starved, wait=wait)
            assert out["met"] is True and done.exists(), {k: out[k] for k in ("met", "waited", "elapsedMs")}
    finally:
        with contextlib.suppress(ProcessLookupError):  # it ends by itself once c.done exists
            hog.kill()
        await hog.wait()


async def test_resize_returns_with_the_new_size(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        for cols, rows in ((100, 30), (61, 17)):
            _, data = await call(
                client,
                "shell_manage",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "resize", "cols": cols, "rows": rows},
                        }
                    ]
                },
            )
            assert data["tasks"][0]["ok"], data
            out = await run(client, shell, "stty size")
            assert f"{rows} {cols}" in out["lines"], out


async def test_a_persons_commands_have_exit_codes_and_retry_reruns_them(
    tether_home: Path, tmp_path: Path
) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        assert (await run(client, shell, "echo agent"))["exitCode"] == 0
        # A person at a terminal types a command (tmux send-keys is what a terminal client does).
        tmux(tether_home, "send-keys", "-t", f"={shell}:", "echo person >> p.txt; (exit 4)", "Enter")
        # Until bash takes the line the shell is idle at its prompt as far as its log says, so the
        # read may come back before the person's command ran: ask until it has.
        person = {"text": "echo person >> p.txt; (exit 4)", "exitCode": 4, "by": "person"}
        with anyio.fail_after(HANG_S):
            while True:
                out = await read(client, shell, wait={"kind": "idle"})
                assert out["met"] is True
                _, data = await call(client, "shell_state", {})
                if data["shells"][0]["lastCommand"] == person:
                    break
                await anyio.sleep(0.05)
        retried = await call(
            client,
            "shell_run",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "retry", "mode": "last-failed"}}]},
        )
        assert retried[1]["tasks"][0]["exitCode"] == 4
        assert (tmp_path / "p.txt").read_text() == "person\nperson\n"


async def test_a_macro_set_without_submit_is_not_run(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        await call(
            client,
            "shell_manage",
            {
                "tasks": [
                    {"action": {"kind": "macro-set", "name": "mk", "text": "touch made.txt", "submit": False}}
                ]
            },
        )
        result = await client.call_tool(
            "shell_run",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "run", "command": "/mk"}}]},
        )
        assert "without Enter" in text_of(result)
        assert not (tmp_path / "made.txt").exists()
        screen = await read(client, shell, {"mode": "screen"})
        assert any(line.endswith("touch made.txt") for line in screen["lines"]), screen
        await send(client, shell, "", ["Enter"])
        assert (await read(client, shell, wait={"kind": "idle"}))["met"] is True
        assert (tmp_path / "made.txt").exists()


async def test_a_timeout_names_the_program_that_waits_for_input(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        await run(
            client,
            shell,
            "git init -q r && cd r && for i in 1 2 3; do git commit -q --allow-empty -m c$i; done",
        )
        # The pager shows the log before the exit wait times out (not a race with a 1.5 s deadline).
        started = await run(
            client,
            shell,
            "LESS= GIT_PAGER=less git log",
            wait={"kind": "match", "pattern": "c1$", "timeoutMs": HANG_MS},
        )
        assert started["met"] is True, started
        out = await read(client, shell, wait={"kind": "exit", "runId": started["runId"], "timeoutMs": 1})
        out["runId"] = started["runId"]
        assert out["met"] is False
        assert any(
            'less is in front of the shell and is probably waiting for a key: send "q"' in line
            for line in out["lines"]
        ), out["lines"]
        await send(client, shell, "", ["q"])
        done = await read(client, shell, wait={"kind": "exit", "runId": out["runId"]})
        assert done["exitCode"] == 0, done


async def test_a_shell_that_puts_a_fifo_where_its_state_goes_cannot_stall_the_server(
    tether_home: Path,
) -> None:
    """The server reads the state file the shell writes at every prompt. A program in the shell (a
    confined one writes that file itself) may replace it with a FIFO: opening a FIFO for reading
    blocks until a writer comes, which would freeze every call of the server. The next run must
    come back, judged without the state, and so must a call to another shell."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        other = await open_shell(client)
        out = await run(
            client,
            shell,
            'rm -f "$__tether_sf" && mkfifo "$__tether_sf" && echo planted',
            safety={"bypassGuard": True, "reason": "red team: a FIFO where the state goes"},
        )
        assert out["exitCode"] == 0 and "planted" in out["lines"], out
        after = await asyncio.wait_for(run(client, shell, "echo still-here"), HANG_S)
        assert after["exitCode"] == 0 and "still-here" in after["lines"], after
        elsewhere = await asyncio.wait_for(run(client, other, "echo other-shell"), HANG_S)
        assert elsewhere["exitCode"] == 0 and "other-shell" in elsewhere["lines"], elsewhere


async def test_a_relative_home_is_one_directory_for_the_server_and_its_shells(tether_home: Path) -> None:
    """``TETHER_HOME=thN`` from the home's parent: the shell's prompt hook still writes its state
    into the home after a ``cd`` (it wrote ``thN/rc/…`` under the new directory, and failed), and
    what the shell is told is the home is the same directory from anywhere."""
    (tether_home / "x").mkdir()
    env = {
        "TETHER_HOME": f"{tether_home.name}/x/../",  # relative, and not in its one spelling
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    server = StdioServerParameters(command=TETHER, args=["mcp"], env=env, cwd=str(tether_home.parent))
    async with Client(server) as client:
        shell = await open_shell(client)
        out = await run(client, shell, 'cd / && echo "home=$TETHER_HOME"')
        assert out["exitCode"] == 0 and out["lines"] == [f"home={tether_home}"], out
        out = await run(client, shell, "cd /tmp && pwd")
        assert out["lines"] == ["/tmp"], out
        _, state = await call(client, "shell_state", {"sessions": shell})
        assert state["shells"][0]["cwd"] == "/tmp", state  # read from the state file the hook wrote
        # The guard knows its own socket by the home's one spelling, as the command names it.
        out = await run(client, shell, f"tmux -S {tether_home}/tmux.sock ls")
        assert out["errorCode"] == "BLOCKED" and "rule tether-socket" in out["error"], out
    assert (tether_home / "tmux.sock").exists()


async def test_a_home_too_long_for_the_tmux_socket_is_one_clear_error(tether_home: Path) -> None:
    home = tether_home / ("h" * 100)  # tmux.sock's path past a unix socket's 107 bytes
    catalog = build_catalog(load_config(home), with_jobs=False)
    try:
        result = await catalog.registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open"}}]}, CallContext(actor="conv-long")
        )
        (task,) = result.structured["tasks"]
        assert not task["ok"] and task["errorCode"] == "SESSION_ERROR", task
        message = task["error"]
        assert f"the tmux socket {home}/tmux.sock would be {len(str(home)) + 10} bytes long" in message
        assert "set TETHER_HOME to a shorter path" in message
        # The one-shot tool does not need the socket: it still runs.
        done = await catalog.registry.call(
            "bash", {"command": "echo ok", "description": "d"}, CallContext(actor="c")
        )
        assert done.structured["stdout"]["text"] == "ok\n", done.structured
    finally:
        await catalog.aclose()


@pytest.mark.parametrize(
    ("options", "reason"), [("ro", "Read-only file system"), ("size=4k", "No space left on device")]
)
async def test_a_write_the_file_system_refuses_is_one_clear_error_and_then_works_again(
    tether_home: Path, options: str, reason: str
) -> None:
    """The shells' start-up files on a file system of their own, read-only or full: ``shell_open``
    was an internal error (the traceback in the server's log); now the call says which write the
    file system refused and why, is audited, and the next call after the fix works."""
    rc = tether_home / "rc"
    rc.mkdir(mode=0o700)
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", f"{options},mode=0700", "tmpfs", str(rc)])
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    ctx = CallContext(actor="conv-disk")
    try:
        if options.startswith("size"):
            with contextlib.suppress(OSError):  # fill its one page
                (rc / "filler").write_bytes(b"x" * 65536)
        with pytest.raises(StorageError) as refused:
            await catalog.registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, ctx)
        assert refused.value.code == "STORAGE_UNAVAILABLE"
        # A failed open names its file; a write to an open file has no name: the home is said.
        where = f"{rc}/.dsh-" if options == "ro" else f"a file under {tether_home} ("
        assert refused.value.message.startswith(
            f"shell_open: the file system refused tether's write to {where}"
        ) and refused.value.message.endswith(
            f"({reason}); free space there, or make it writable, and call again"
        )
        assert [p.name for p in rc.iterdir()] == (
            ["filler"] if options != "ro" else []
        )  # nothing half-written
        (record,) = [r for r in query(tether_home, limit=10) if r.tool == "shell_open"]
        assert (record.outcome, record.extra["code"]) == ("error", "STORAGE_UNAVAILABLE"), record
        assert record.detail == refused.value.message
        await anyio.run_process(["umount", str(rc)])
        done = await catalog.registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, ctx)
        assert done.structured["tasks"][0]["ok"], done.structured
    finally:
        await catalog.aclose()
        await anyio.run_process(["umount", "-l", str(rc)], check=False)


async def test_no_inotify_instance_left_is_one_clear_error_and_the_rest_serves(tether_home: Path) -> None:
    """A user whose inotify instances are all in use (128 by default, shared by every program that
    watches files): the shell tools were an internal error with a traceback. Here the server runs
    in a user namespace of its own whose limit is 0."""
    script = 'echo 0 > /proc/sys/user/max_inotify_instances && exec "$0" mcp'
    env = {
        "TETHER_HOME": str(tether_home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    # Retention off: its first sweep, a second after the start, holds the store open while it
    # runs, which a count of descriptors taken then would read as a leak of the refused calls.
    (tether_home / "config.toml").write_text("[sessions]\nkeep_closed_days = 0\n")
    server = StdioServerParameters(
        command="unshare", args=["--user", "--map-root-user", "sh", "-c", script, TETHER], env=env
    )
    async with Client(server) as client:
        refused = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        assert refused.is_error and text_of(refused).startswith(
            f"SESSION_ERROR: persistent shells need an inotify watch on {tether_home}/logs, and none is "
            "left (Too many open files): raise the limits (fs.inotify.max_user_instances = "
        ), text_of(refused)
        done = await client.call_tool("bash", {"command": "echo still-serving", "description": "d"})
        assert text_of(done) == "still-serving"
        # Each refused call released what it had opened (it leaked a database connection).
        counts = []
        for _ in range(3):
            for _ in range(10):
                await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
            counts.append(_server_descriptors(tether_home))
        assert counts[0] == counts[1] == counts[2], counts


def _server_descriptors(home: Path) -> int:
    """Open descriptors of the ``tether mcp`` serving ``home`` (parallel tests run others)."""
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            serving = (proc.info["cmdline"] or [])[-1:] == ["mcp"]
            if serving and proc.environ().get("TETHER_HOME") == str(home):
                return int(proc.num_fds())
    raise AssertionError(f"no tether mcp serves {home}")


async def test_a_directory_where_the_tmux_socket_belongs_is_one_clear_error(tether_home: Path) -> None:
    """``$TETHER_HOME/tmux.sock`` a directory (a stray ``mkdir``, a bad copy of a home): tmux
    said why on stderr, which nobody reads, and ``shell_open`` answered, after about 40 s of
    retries, "the tmux control client ended (is the tmux server gone?)"."""
    (tether_home / "tmux.sock").mkdir()
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        result = await catalog.registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open"}}]}, CallContext(actor="conv-dir")
        )
        (task,) = result.structured["tasks"]
        assert not task["ok"] and task["errorCode"] == "SESSION_ERROR", task
        assert task["error"] == (
            f"the tmux socket {tether_home}/tmux.sock is a directory, so tmux can neither start nor "
            "reach its server there: remove or rename that directory (persistent shells keep their "
            "tmux server's socket at that path)"
        )
        (tether_home / "tmux.sock").rmdir()
        done = await catalog.registry.call(
            "shell_open", {"tasks": [{"action": {"kind": "open"}}]}, CallContext(actor="conv-dir")
        )
        assert done.structured["tasks"][0]["ok"], done.structured
    finally:
        await catalog.aclose()
