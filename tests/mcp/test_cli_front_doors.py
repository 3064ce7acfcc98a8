"""``tether mcp`` (stdio) and ``tether serve`` (HTTP) as real subprocesses, driven by the SDK client.

The MCP Inspector and the other real clients drive them in tests/clients (``make test-clients``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp_harness import http_client, text_of

from hang import HANG_S
from proc_probe import alive_with, unique_sleep_arg, wait_until
from serve_banner import banner_field, read_banner

TETHER = str(Path(sys.executable).parent / "tether")


def stdio_params(home: Path, conversation: str | None = None) -> StdioServerParameters:
    env = {"TETHER_HOME": str(home), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    if "PYTHONPATH" in os.environ:  # a checkout's sources run first (a worktree beside an install)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if conversation is not None:
        env["TETHER_CONVERSATION"] = conversation
    return StdioServerParameters(command=TETHER, args=["mcp"], env=env)


async def test_stdio_server_lists_and_runs_tools(tether_home: Path) -> None:
    async with Client(stdio_params(tether_home, "conv-stdio-test")) as client:
        instructions = (
            client.session.initialize_result.instructions if client.session.initialize_result else ""
        )
        assert instructions is not None and "## tool:bash" in instructions
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names[0] == "bash" and {"job_list", "job_output", "job_kill"} <= set(names)
        # The command writes to its own stdout; only MCP may reach the server's stdout.
        result = await client.call_tool(
            "bash", {"command": "echo hello; echo noise >&2", "description": "greet"}
        )
        assert text_of(result) == "hello\n[stderr]\nnoise"
        assert result.structured_content is not None and result.structured_content["kind"] == "foreground"
        started = await client.call_tool(
            "bash", {"command": "sleep 30", "description": "bg", "run_in_background": True}
        )
        assert started.structured_content is not None and started.structured_content["kind"] == "background"
        bad = await client.call_tool("bash", {"command": "true"})
        assert bad.is_error and "field 'description' is required" in text_of(bad)
    log = (tether_home / "logs" / "mcp.log").read_text()
    assert "conversation conv-stdio-test" in log


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_sigterm_on_tether_mcp_kills_its_jobs(tether_home: Path) -> None:
    # `$$` inside the command container is not a pid of ours: find the job by its argument.
    token = unique_sleep_arg()
    both_gone = False
    job_pid = -1
    with contextlib.suppress(Exception):
        async with Client(stdio_params(tether_home)) as client:
            command = f"sleep {token}"
            await client.call_tool(
                "bash", {"command": command, "description": "bg", "run_in_background": True}
            )
            with anyio.fail_after(HANG_S):
                while not alive_with(token):
                    await anyio.sleep(0.01)
            [job_pid] = alive_with(token)
            server = next(p for p in psutil.Process(job_pid).parents() if "mcp" in p.cmdline())
            server.send_signal(signal.SIGTERM)
            with anyio.move_on_after(HANG_S):
                while _alive(job_pid) or _alive(server.pid):
                    await anyio.sleep(0.02)
            both_gone = not _alive(job_pid) and not _alive(server.pid)
    # (Leaving the client raises once its server is gone; that is not what this test checks.)
    assert both_gone, "SIGTERM must end tether mcp and its jobs without waiting for stdin to close"
    assert job_pid > 0 and not _alive(job_pid)
    assert (
        "received SIGTERM; stopping this conversation's calls and jobs and exiting"
        in (tether_home / "logs" / "mcp.log").read_text()
    )


def test_stdio_stdout_carries_only_mcp(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "bash",
                "arguments": {"command": "echo to-stdout; echo to-stderr >&2", "description": "noise"},
            },
        },
    ]
    process = subprocess.Popen(
        [TETHER, "mcp"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    replies = []
    try:
        for message in messages:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            if "id" in message:
                replies.append(json.loads(process.stdout.readline()))
    finally:
        process.stdin.close()
        rest = process.stdout.read()
        process.wait(timeout=HANG_S)
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"]["content"][0]["text"] == "to-stdout\n[stderr]\nto-stderr"
    assert rest == "" and process.returncode == 0
    assert process.stderr is not None and "tether mcp serving conversation conv-" in process.stderr.read()


def test_stdio_refuses_a_malformed_conversation_id(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home), "TETHER_CONVERSATION": "bad id with spaces"}
    done = subprocess.run(
        [TETHER, "mcp"], env=env, capture_output=True, text=True, timeout=HANG_S, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "TETHER_CONVERSATION='bad id with spaces' is not a valid conversation id" in done.stderr


@pytest.fixture
def served(tether_home: Path) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    process = subprocess.Popen(
        [TETHER, "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = read_banner(process.stdout)
        text = "".join(banner)
        url, token = banner_field(banner, "URL"), banner_field(banner, "token")
        assert '"command"' in text and '"Authorization": "Bearer ' in text and "claude mcp add" in text
        yield url, token, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def test_serve_prints_url_token_and_serves_with_it(
    tether_home: Path, served: tuple[str, str, subprocess.Popen[str]]
) -> None:
    url, token, process = served
    token_file = tether_home / "token"
    assert token_file.read_text().strip() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    sleep_arg = unique_sleep_arg()
    async with http_client(url, token=token) as client:
        result = await client.call_tool("bash", {"command": "echo over http", "description": "greet"})
        assert text_of(result) == "over http"
        assert isinstance(result.content[0], types.TextContent)
        command = f"sleep {sleep_arg}"
        await client.call_tool("bash", {"command": command, "description": "bg", "run_in_background": True})
        with anyio.fail_after(HANG_S):
            while not alive_with(sleep_arg):
                await anyio.sleep(0.01)
        [job_pid] = alive_with(sleep_arg)
    # Closing the client ends its MCP session, hence its conversation, hence its jobs.
    with anyio.fail_after(HANG_S):
        while _alive(job_pid):
            await anyio.sleep(0.02)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=HANG_S) == 0
    assert process.stderr is not None and "Traceback" not in process.stderr.read()


def test_serve_refuses_a_remote_host_without_the_flag(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    done = subprocess.run(
        [TETHER, "serve", "--host", "0.0.0.0"], env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 2
    assert "--host 0.0.0.0 is not a loopback address" in done.stderr and "--allow-remote" in done.stderr
    # The same from config.toml, named where the person wrote it.
    (tether_home / "config.toml").write_text('[server]\nhost = "0.0.0.0"\nport = 70000\n')
    done = subprocess.run([TETHER, "serve"], env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 2
    assert "config.toml: [server].port 70000 is out of range; allowed: 0-65535" in done.stderr
    (tether_home / "config.toml").write_text('[server]\nhost = "0.0.0.0"\n')
    done = subprocess.run([TETHER, "serve"], env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 2
    assert "config.toml: [server].host 0.0.0.0 is not a loopback address" in done.stderr


def test_serve_that_cannot_listen_names_the_setting_to_change(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [TETHER, "serve", "--port", str(port)], env=env, capture_output=True, text=True, timeout=HANG_S
        )
        assert (done.returncode, done.stderr) == (
            2,
            f"tether: INVALID_ARGUMENT: cannot listen on 127.0.0.1:{port}: Address already in use; another "
            "program listens there; pick another --port (0 picks a free port)\n",
        )
        (tether_home / "config.toml").write_text(f"[server]\nport = {port}\n")
        done = subprocess.run([TETHER, "serve"], env=env, capture_output=True, text=True, timeout=HANG_S)
        assert "pick another config.toml: [server].port (0 picks a free port)" in done.stderr
    # An address no interface of this machine has (TEST-NET-1): the host is what to change.
    done = subprocess.run(
        [TETHER, "serve", "--host", "192.0.2.1", "--allow-remote", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 2 and done.stderr.endswith(
        "tether: INVALID_ARGUMENT: cannot listen on 192.0.2.1:0: Cannot assign requested address; pick a "
        "--host that is an address of this machine\n"
    ), done.stderr


@pytest.mark.parametrize("value", ["", "http://box.lan", "box.lan:8765", "box lan", "*", "box.lan/mcp"])
def test_serve_refuses_an_allowed_host_no_client_can_send(tether_home: Path, value: str) -> None:
    # Each was accepted and matched nothing; with 0.0.0.0 the first became the banner's URL.
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    done = subprocess.run(
        [TETHER, "serve", "--port", "0", "--allowed-host", value],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"tether: INVALID_ARGUMENT: --allowed-host {value!r} is not a host name a client can send; give "
        "a name such as box.lan or an address such as 192.168.1.5 (no scheme, port, path or wildcard)\n",
    )


def test_allowed_hosts_are_spelled_as_a_host_header_carries_them() -> None:
    from tether.mcp.http import host_name

    assert [host_name(v) for v in ("Box.LAN.", "fe80::1", "[::1]", "10.0.0.5", "a-.lan", "x_y")] == [
        "box.lan",
        "[fe80::1]",
        "[::1]",
        "10.0.0.5",
        None,
        None,
    ]


def test_serve_on_a_remote_host_warns(tether_home: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    argv = [
        TETHER,
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--allow-remote",
        "--allowed-host",
        "box.lan",
    ]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    try:
        warning = process.stderr.readline()
        assert warning.startswith("WARNING: serving on 0.0.0.0: anyone who can reach this port")
        assert process.stdout.readline() == "tether serve: MCP over streamable HTTP\n"
        assert process.stdout.readline().startswith("  URL:    http://box.lan:")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=HANG_S)


def test_a_shutdown_that_hangs_is_ended_by_the_watchdog() -> None:
    # The first Ctrl+C arms it; a shutdown stuck past the deadline (here a sleep) ends the process.
    code = (
        "import time\n"
        "from tether.cli.actions import serve as s\n"
        "s._FORCE_EXIT_S = 0.2\n"
        "s._arm_watchdog()\n"
        "time.sleep(600)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 1
    assert "shutdown did not finish within 0.2 s; exiting now" in done.stderr


def test_ctrl_c_while_serve_starts_ends_it_even_if_the_parent_ignored_it(tether_home: Path) -> None:
    # A parent that ignores SIGINT (pytest-xdist's workers do) hands that on; the banner says
    # "Press Ctrl+C", so serve takes the signal back before it prints anything. The signal comes at
    # the first line of output, long before the app has started.
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    argv = [TETHER, "serve", "--host", "0.0.0.0", "--port", "0", "--allow-remote"]
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert process.stderr is not None
    try:
        assert process.stderr.readline().startswith("WARNING: serving on 0.0.0.0")
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=HANG_S)
        _, err = process.communicate()
    # Ended by the signal, or — a start-up that takes its time to unwind on a loaded machine (once
    # in a stressed full run) — by the watchdog the signal armed, which says so.
    assert code in (0, 130) or (code == 1 and "shutdown did not finish within" in err), (code, err)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server writes on ``sock`` until it closes the connection (a hang fails)."""
    sock.settimeout(HANG_S)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return received


async def test_a_connection_that_never_finishes_its_request_head_is_closed(
    served: tuple[str, str, subprocess.Popen[str]],
) -> None:
    # Before any token or Host check: half a request head, or one that drips a byte at a time,
    # held its connection forever (uvicorn has no timer before the first request, and any byte
    # resets its keep-alive timer), so anyone reaching the port could use up the descriptors.
    url, token, process = served
    address = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    peer = (address[0], int(address[1]))
    half = socket.create_connection(peer)
    drip = socket.create_connection(peer)
    stop = threading.Event()

    def dripping() -> None:
        drip.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
        with contextlib.suppress(OSError):
            while not stop.wait(0.5):
                drip.sendall(b"a")

    dripper = threading.Thread(target=dripping, daemon=True)
    try:
        half.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
        dripper.start()
        async with http_client(url, token=token) as client:  # everyone else is served meanwhile
            result = await client.call_tool("bash", {"command": "echo served", "description": "d"})
            assert text_of(result) == "served"
        answered = _read_until_closed(half)
        assert answered.startswith(b"HTTP/1.1 408 ") and b"request head" in answered, answered
        assert _read_until_closed(drip).startswith(b"HTTP/1.1 408 ")
    finally:
        stop.set()
        dripper.join(timeout=HANG_S)
        half.close()
        drip.close()
    assert process.poll() is None


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _closed_by_peer(sock: socket.socket, received: dict[socket.socket, bytes]) -> bool:
    """Whether the server has closed ``sock`` (what it answered first goes to ``received``): never
    blocks."""
    sock.setblocking(False)
    try:
        while chunk := sock.recv(4096):
            received[sock] = received.get(sock, b"") + chunk
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


async def test_a_flood_of_connections_waiting_to_send_a_head_cannot_use_up_the_descriptors(
    served: tuple[str, str, subprocess.Popen[str]],
) -> None:
    # Each connection had 10 s to send its head, so a flood faster than one every 10 s / the
    # descriptors (0.5 ms here) still used them all up. Now the oldest waiting one is closed for
    # each new one beyond the bound, and a client that sends its head at once is served.
    url, token, process = served
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    soft = psutil.Process(process.pid).rlimit(psutil.RLIMIT_NOFILE)[0]
    bound = max(16, min(256, soft // 4))
    before = _fds(process.pid)
    flood: list[socket.socket] = []
    received: dict[socket.socket, bytes] = {}
    try:
        for _ in range(2 * bound + 50):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
            flood.append(sock)
        # The server accepts them in its own time; each beyond the bound closes the oldest.
        closed = lambda: sum(_closed_by_peer(sock, received) for sock in flood)  # noqa: E731
        assert wait_until(lambda: closed() >= len(flood) - bound)
        assert _fds(process.pid) <= before + bound + 10, (_fds(process.pid), before, bound)
        evicted = received.get(flood[0], b"")
        assert evicted.startswith(b"HTTP/1.1 503 ") and b"too many connections" in evicted, evicted
        async with http_client(url, token=token) as client:  # served while the flood waits
            result = await client.call_tool("bash", {"command": "echo served", "description": "d"})
            assert text_of(result) == "served"
    finally:
        for sock in flood:
            sock.close()
    assert process.poll() is None


@pytest.mark.parametrize("kind", ["directory", "fifo", "not-utf8", "unsendable"])
def test_serve_names_a_token_file_it_cannot_use(tether_home: Path, kind: str) -> None:
    # A FIFO hung the start for ever (its read waited for a writer); a directory or bytes that are
    # not UTF-8 were a traceback with exit 1. A token with a space or a control character in it
    # was served, printed raw to the terminal, and no client could send it in a header.
    token = tether_home / "token"
    if kind == "directory":
        token.mkdir(mode=0o700)
    elif kind == "fifo":
        os.mkfifo(token, 0o600)
    elif kind == "unsendable":
        token.write_text("pasted token\twith\x01" + "d" * 20 + "\n", encoding="utf-8")
        token.chmod(0o600)
    else:
        token.write_bytes(b"\xff\xfe" * 20)
        token.chmod(0o600)
    done = subprocess.run(
        [TETHER, "serve", "--port", "0"],
        env={**os.environ, "TETHER_HOME": str(tether_home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 2, done
    assert f"tether: INVALID_ARGUMENT: {token} " in done.stderr, done.stderr
    assert f"delete it (rm -r {token}) and tether serve creates a new token" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_broken_database_is_a_named_storage_error_for_the_client(tether_home: Path) -> None:
    # A tether.db overwritten with other bytes: every call was "INTERNAL: tool … failed unexpectedly".
    (tether_home / "tether.db").write_bytes(b"not a database\n" * 300)
    async with Client(stdio_params(tether_home)) as client:
        result = await client.call_tool("bash", {"command": "echo hi", "description": "greet"})
        assert result.is_error, text_of(result)
        text = text_of(result)
        assert text.startswith(f"STORAGE_UNAVAILABLE: {tether_home / 'tether.db'} is not a database"), text
        assert "tether starts a new one" in text
        assert (await client.list_tools()).tools  # the conversation goes on


async def test_a_server_whose_working_directory_was_removed_names_it(
    tether_home: Path, tmp_path: Path
) -> None:
    # A client started `tether mcp` in a project deleted since: getcwd() fails, and `shell_open`
    # without a cwd answered `INTERNAL: … failed unexpectedly`, `bash` without a workdir likewise.
    gone = tmp_path / "project"
    gone.mkdir()
    params = stdio_params(tether_home)
    params = StdioServerParameters(
        command="bash",
        args=["-c", 'cd "$0" && rmdir "$0" && exec "$@"', str(gone), params.command, *params.args],
        env=params.env,
    )
    async with Client(params) as client:
        opened = await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open"}}]})
        assert "tether's own working directory no longer exists (it was removed); give open.cwd" in text_of(
            opened
        )
        ran = await client.call_tool("bash", {"command": "pwd", "description": "where"})
        assert ran.is_error and text_of(ran).startswith("SHELL_BAD_CWD: the current working directory")
        # An absolute directory needs none of it.
        ran = await client.call_tool("bash", {"command": "pwd", "description": "where", "workdir": "/"})
        assert not ran.is_error and text_of(ran) == "/"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (needs root)")
def test_serve_first_started_on_a_full_disk_names_the_token_and_starts_once_there_is_room(
    tether_home: Path,
) -> None:
    """The first ``tether serve`` on a full disk said "its output could not be written" (the token's
    write, which names no file), and left an empty ``token`` behind: once space was freed, every
    start was refused ("a token shorter than 16 characters; delete it") until a person did. The
    token is linked into place only once it is whole, and the error names it."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(tether_home)], check=True)
    env = {**os.environ, "TETHER_HOME": str(tether_home)}
    try:
        filler = tether_home / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as out:
            while True:
                out.write(b"\0" * 4096)
                out.flush()
        done = subprocess.run(
            [TETHER, "serve", "--port", "0"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert done.returncode == 2, done
        token = tether_home / "token"
        assert (
            f"tether: STORAGE_UNAVAILABLE: {token} could not be written (No space left on device); "
            "free space there, or make it writable, and start tether serve again"
        ) in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert sorted(p.name for p in tether_home.iterdir() if "token" in p.name) == []
        filler.unlink()
        process = subprocess.Popen(
            [TETHER, "serve", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert process.stdout is not None
            assert banner_field(read_banner(process.stdout), "token") == token.read_text().strip()
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        subprocess.run(["tmux", "-S", str(tether_home / "tmux.sock"), "kill-server"], capture_output=True)
        subprocess.run(["umount", "-l", str(tether_home)], check=False)
