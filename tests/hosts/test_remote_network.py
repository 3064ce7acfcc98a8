"""Remote hosts when the network misbehaves: a killed ssh master (between calls and in the middle
of a wait), a stopped sshd, a login that never answers, an unknown host key; two hosts and this
machine in one call."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from shell_harness import call, open_shell, read, run, shell_client
from sshd_harness import RemoteHosts, _descendants, end_processes, keygen, process_running

from hang import HANG_MS, HANG_S
from tether.config import load_config
from tether.errors import TetherError
from tether.process.tree import reap_adopted
from tether.shells import ConnectionLost, HostError, Shells, SshHost
from tether.shells import open_shell as open_in_process
from tether.shells.lifecycle import close
from tether.shells.tmux import control as control_module
from tether.shells.tmux.control import ClientEnded, SessionError
from tether.tools.registry import CallContext
from tether.tools.shells import ShellTools


def _kill_master(remote: RemoteHosts, name: str) -> int:
    pid = remote.ssh_check(name)
    assert pid is not None, "no shared connection runs"
    os.kill(pid, signal.SIGKILL)
    end_processes([pid])
    reap_adopted(pid)
    return pid


async def test_a_killed_master_loses_nothing(tether_home: Path, remote: RemoteHosts) -> None:
    remote.add("box-a")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        await run(client, shell, "cd /tmp && export KEEP=kept")
        # Between calls: the next call reconnects, and the shell kept its directory and variables.
        old = _kill_master(remote, "box-a")
        out = await run(client, shell, "echo $KEEP $PWD")
        assert out["exitCode"] == 0 and out["lines"] == ["kept /tmp"], out
        new = remote.ssh_check("box-a")
        assert new is not None and new != old
        # In the middle of a wait: it ends with the documented error, at once (not at its timeout).
        results: dict[str, Any] = {}

        async def waiting() -> None:
            _, data = await call(
                client,
                "shell_run",
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "run", "command": "sleep 31.25; echo late"},
                            "wait": {"kind": "exit", "timeoutMs": HANG_MS},
                        }
                    ]
                },
            )
            results["task"] = data["tasks"][0]

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            with anyio.fail_after(HANG_S):
                while not process_running("sleep\x0031.25"):
                    await anyio.sleep(0.02)
            _kill_master(remote, "box-a")
        task = results["task"]
        assert task["errorCode"] == "CONNECTION_LOST", task
        assert "connection to box-a lost; reconnecting" in task["error"]
        # The program still runs there; the next call reconnects and sees it in front.
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert data["shells"][0]["fg"] == "sleep", data
        await call(
            client,
            "shell_send",
            {
                "tasks": [
                    {"target": {"sessions": shell}, "action": {"kind": "send", "text": "", "keys": ["C-c"]}}
                ]
            },
        )
        out = await read(client, shell, wait={"kind": "exit", "timeoutMs": HANG_MS})
        assert out["exitCode"] == 130, out
        out = await run(client, shell, "echo $KEEP $PWD")
        assert out["lines"] == ["kept /tmp"]
        # The history read after the drops is whole: nothing was lost or doubled in the mirror.
        out = await read(client, shell, {"kind": "read", "search": "^kept /tmp$"})
        assert out["lines"][0].startswith("2 matches"), out


async def test_a_stopped_sshd_fails_fast_and_local_shells_keep_working(
    tether_home: Path, remote: RemoteHosts
) -> None:
    box = remote.add("box-a", timeout=3)
    async with shell_client(tether_home) as client:
        far = await open_shell(client, host="box-a")
        near = await open_shell(client)
        await run(client, far, "export KEEP=still-here")
        box.sshd.stop()
        for _ in range(2):  # the call that finds out, and one during the back-off
            _, data = await call(
                client,
                "shell_run",
                {"tasks": [{"target": {"sessions": far}, "action": {"kind": "run", "command": "echo x"}}]},
            )
            task = data["tasks"][0]
            assert task["errorCode"] == "HOST_UNREACHABLE", task
            assert "host box-a" in task["error"] and "connection refused" in task["error"], task
            out = await run(client, near, "echo near")
            assert out["exitCode"] == 0 and out["lines"] == ["near"]
        text, data = await call(client, "shell_state", {"scope": "*", "verbose": True})
        assert [r["shell"] for r in data["shells"]] == [near]
        assert "box-a" in data["diagnostics"]["hostsDown"], text
        # Opening there fails the same way; the host's shells are not reaped while it is away.
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}]})
        assert data["tasks"][0]["errorCode"] == "HOST_UNREACHABLE"
        _, data = await call(client, "shell_manage", {"tasks": [{"action": {"kind": "reap"}}]})
        assert far not in str(data)
        # Back on the network: the shell is there, with its state.
        box.sshd.start()
        out = await run(client, far, "echo $KEEP")
        assert out["exitCode"] == 0 and out["lines"] == ["still-here"], out


async def test_a_login_that_never_finishes_fails_at_its_deadline_and_leaves_nothing(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The account's ~/.bashrc never ends (as pyenv's rehash waiting on a stale lock): bash run by
    # sshd reads it even for a command. It writes on, so it ends once nobody reads.
    (tmp_path / ".bashrc").write_text("while :; do printf . >&2; sleep 0.1; done\n")
    monkeypatch.setenv("HOME", str(tmp_path))  # the host's sessions get it (see sshd_harness)
    remote.add("box-a", timeout=1)
    shells = Shells.get(load_config(tether_home))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with anyio.fail_after(HANG_S), pytest.raises(TetherError) as raised:
                await open_in_process(
                    shells,
                    owner="t",
                    label="x",
                    cwd=None,
                    cols=80,
                    rows=24,
                    idle_minutes=None,
                    host_name="box-a",
                )
            # The killed ssh call was collected with its pipes: nothing is left for the garbage
            # collector to close (on a loop that may be gone by then).
            gc.collect()
        assert getattr(raised.value, "code", None) == "HOST_UNREACHABLE", raised.value
        # It says what was reached and where to look.
        message = str(raised.value)
        assert "host box-a" in message and "logged in, but the command did not finish within 7 s" in message
        assert "~/.bashrc" in message and "raise connect_timeout" in message
        # The master that kept the command's pipes ended with it: nothing runs on for the call.
        assert remote.ssh_check("box-a") is None
        assert not [w for w in caught if "unclosed" in str(w.message)], [str(w.message) for w in caught]
    finally:
        await shells.close()


async def test_an_unknown_host_key_is_refused(tether_home: Path, remote: RemoteHosts) -> None:
    box = remote.add("box-a", known=False)
    async with shell_client(tether_home) as client:
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}]})
        task = data["tasks"][0]
        assert task["errorCode"] == "HOST_UNREACHABLE", task
        assert "host key is not in known_hosts" in task["error"]
        assert "never accepts a key by itself" in task["error"]
        assert f"ssh-keyscan -p {box.sshd.port} 127.0.0.1" in task["error"]
        # Nothing was written to known_hosts, and no shell was opened there.
        assert remote.known_hosts.read_text() == ""
        assert not (box.home / "tmux.sock").exists()
    # Once the key is known (as the message says), the same host works.
    remote.known_hosts.write_text(box.sshd.known_hosts_line() + "\n")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        assert (await run(client, shell, "echo trusted"))["lines"] == ["trusted"]


async def test_two_hosts_and_local_in_one_call(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path
) -> None:
    remote.add("box-a")
    remote.add("box-b")
    async with shell_client(tether_home) as client:
        text, data = await call(
            client,
            "shell_open",
            {
                "tasks": [
                    {"action": {"kind": "open", "host": "box-a"}},
                    {"action": {"kind": "open", "host": "box-b"}},
                    {"action": {"kind": "open"}},
                ]
            },
        )
        shells = [t["shell"] for t in data["tasks"]]
        assert len(set(shells)) == 3, text
        _, data = await call(client, "shell_state", {"scope": "*"})
        assert {r["shell"]: r["host"] for r in data["shells"]} == dict(
            zip(shells, ["box-a", "box-b", "local"], strict=True)
        )
        # In parallel: each task ends only once all three have started (run one after the other,
        # the first would wait for the others until its timeout).
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        tasks = [
            {
                "target": {"sessions": s},
                "action": {
                    "kind": "run",
                    "command": f"touch {barrier}/{i}; until [ $(ls {barrier} | wc -l) -eq 3 ]; "
                    f"do sleep 0.02; done; echo done-{i}",
                },
                "wait": {"kind": "exit", "timeoutMs": HANG_MS},
            }
            for i, s in enumerate(shells)
        ]
        _, data = await call(client, "shell_run", {"tasks": tasks, "concurrency": 3})
        assert [t["lines"] for t in data["tasks"]] == [["done-0"], ["done-1"], ["done-2"]], data
        assert [t["exitCode"] for t in data["tasks"]] == [0, 0, 0]


async def test_shell_state_names_an_unreachable_host_and_its_shells(
    tether_home: Path, remote: RemoteHosts
) -> None:
    box = remote.add("box-a", timeout=3)
    async with shell_client(tether_home) as client:
        far = await open_shell(client, host="box-a")
        near = await open_shell(client)
        box.sshd.stop()
        # Asked by id: out of reach, not absent.
        text, data = await call(client, "shell_state", {"sessions": far})
        assert data["shells"] == [], data
        assert data["unreachable"] == [
            {"host": "box-a", "error": data["unreachable"][0]["error"], "shells": [far]}
        ], data
        # Why, as the host last failed: the refused reconnect, or (on a loaded machine, before
        # it was tried) the drop itself.
        error = data["unreachable"][0]["error"]
        assert "connection refused" in error or "connection to box-a lost" in error, error
        first, second = text.splitlines()[:2]
        assert first == "0 shells (scope mine); not listed: the shells of unreachable host box-a", text
        assert second.startswith(
            f"host box-a unreachable ({far} is on it: out of reach, not known to be gone)"
        ), text
        # Every other way of asking names the host and the shell recorded there too.
        for query in ({}, {"scope": "*"}, {"host": "box-a"}):
            text, data = await call(client, "shell_state", query)
            assert [d["host"] for d in data["unreachable"]] == ["box-a"], (query, data)
            assert data["unreachable"][0]["shells"] == [far], (query, data)
            assert "not listed: the shells of unreachable host box-a" in text.splitlines()[0], text
            assert f"recorded there (out of reach, not gone): {far}" in text, text
        # A question about this machine's shells alone says nothing of the host.
        text, data = await call(client, "shell_state", {"sessions": near})
        assert [r["shell"] for r in data["shells"]] == [near] and data["unreachable"] == [], data
        assert "unreachable" not in text
        # Back (a call on the shell reconnects at once; a look alone waits out the back-off).
        box.sshd.start()
        assert (await run(client, far, "echo back"))["lines"] == ["back"]
        _, data = await call(client, "shell_state", {"sessions": far})
        assert [r["shell"] for r in data["shells"]] == [far] and data["unreachable"] == [], data


async def _open_in(shells: Shells, host: str) -> str:
    rec, _ = await open_in_process(
        shells, owner="t", label="", cwd=None, cols=80, rows=24, idle_minutes=None, host_name=host
    )
    return rec.id


@pytest.mark.parametrize("drop", ["after-create", "under-create"])
async def test_an_open_cut_short_by_a_drop_names_the_shell_it_recorded(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch, drop: str
) -> None:
    box = remote.add("box-a", timeout=3)
    shells = Shells.get(load_config(tether_home))
    try:
        host = shells.hosts["box-a"]
        assert isinstance(host, SshHost)
        if drop == "after-create":
            # tmux made the shell; the connection drops before tether looks at it.
            real_pane_now = host.pane_now

            async def pane_now(shell_id: str) -> Any:
                box.sshd.stop()
                return await real_pane_now(shell_id)

            monkeypatch.setattr(host, "pane_now", pane_now)
        else:
            # tmux ran the request, and the connection dropped before its answer came back.
            real_run_many = host.control.run_many

            async def run_many(cmds: list[tuple[str, ...]], **kw: Any) -> list[list[str]]:
                await real_run_many(cmds, **kw)
                box.sshd.stop()
                raise ClientEnded("the tmux control client ended (is the tmux server gone?)")

            monkeypatch.setattr(host.control, "run_many", run_many)
        with anyio.fail_after(HANG_S), pytest.raises(TetherError) as raised:
            await _open_in(shells, "box-a")
        err = raised.value
        # Lost, or — on a loaded machine, when the reconnect tether tries at once has failed
        # before the open looks — unreachable: either way the error names the shell.
        assert isinstance(err, HostError), (err.code, err.message)
        assert err.code in ("CONNECTION_LOST", "HOST_UNREACHABLE"), (err.code, err.message)
        if err.code == "CONNECTION_LOST":
            assert "connection to box-a lost; reconnecting" in err.message
        else:
            assert "connection refused" in err.message, err.message
        shell = err.shell
        assert shell is not None and shell in err.message, err.message
        assert shells.records.shell(shell) is not None
        # Back on the network: the shell the error named is the one on the host, and closes.
        monkeypatch.undo()
        box.sshd.start()
        await host.connect()
        assert set(await host.panes()) == {shell}
        await close(shells, shell, actor="t")
        assert await host.panes() == {} and shells.records.shells() == {}
    finally:
        await shells.close()


async def test_an_open_the_host_refuses_leaves_no_record(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote.add("box-a", timeout=3)
    shells = Shells.get(load_config(tether_home))
    try:
        host = shells.hosts["box-a"]

        async def run_many(cmds: list[tuple[str, ...]], **kw: Any) -> list[list[str]]:
            raise SessionError("no space left on device")  # tmux answered no: nothing was made

        monkeypatch.setattr(host.control, "run_many", run_many)
        with pytest.raises(SessionError):
            await _open_in(shells, "box-a")
        assert shells.records.shells() == {}
    finally:
        await shells.close()


@pytest.mark.parametrize("found", ["reconnect-failed", "at-once"])
async def test_a_drop_under_a_wait_is_always_the_one_connection_lost(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    box = remote.add("box-a", timeout=3)
    tools = ShellTools(load_config(tether_home))
    ctx = CallContext(actor="t")
    try:
        opened = await tools.open({"tasks": [{"action": {"kind": "open", "host": "box-a"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        host = tools.shells().hosts["box-a"]
        assert isinstance(host, SshHost)
        # The drop is found by a question the wait asks of the host (what is in front of the
        # shell, whether it is alive), not by its connection mark: the host already failed to
        # reconnect (its cached error), or the question's own channel is the first to notice.
        dropped = False

        def wrap(real: Any) -> Any:
            async def asked(*args: Any) -> Any:
                nonlocal dropped
                if not dropped and process_running("sleep\x0031.5"):
                    dropped = True
                    box.sshd.stop()
                    if found == "reconnect-failed":
                        with anyio.fail_after(HANG_S):
                            while host._down is None:
                                await anyio.sleep(0.02)
                return await real(*args)

            return asked

        monkeypatch.setattr(host, "foreground", wrap(host.foreground))
        monkeypatch.setattr(host, "alive", wrap(host.alive))
        with anyio.fail_after(HANG_S):
            result = await tools.run(
                {
                    "tasks": [
                        {
                            "target": {"sessions": shell},
                            "action": {"kind": "run", "command": "sleep 31.5"},
                            "wait": {"kind": "exit", "timeoutMs": HANG_MS},
                        }
                    ]
                },
                ctx,
            )
        task = result.structured["tasks"][0]
        assert dropped
        assert task["errorCode"] == "CONNECTION_LOST", task
        assert task["error"] == (
            "connection to box-a lost; reconnecting (the shell keeps running on box-a; the next call "
            "reconnects — shell_read with wait kind exit picks up the latest run)"
        ), task
    finally:
        await tools.aclose()


async def test_a_changed_host_key_is_refused_with_the_exact_command_that_forgets_it(
    tether_home: Path, remote: RemoteHosts
) -> None:
    box = remote.add("box-a")
    # The machine "was reinstalled": a new host key on the same port, the old one still known.
    box.sshd.stop()
    box.sshd.host_key.unlink()
    box.sshd.host_key.with_suffix(".pub").unlink()
    keygen(box.sshd.host_key)
    box.sshd.start()
    async with shell_client(tether_home) as client:
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}]})
    task = data["tasks"][0]
    assert task["errorCode"] == "HOST_UNREACHABLE", task
    assert "its host key has CHANGED" in task["error"], task
    # The entry's file (its UserKnownHostsFile option) and the name the key is kept under there.
    command = f"ssh-keygen -f '{remote.known_hosts}' -R '[127.0.0.1]:{box.sshd.port}'"
    assert f"remove the old key ({command})" in task["error"], task
    # Run as given, it removes the old key (and nothing is left under the name).
    await anyio.run_process(command, check=True)
    assert f"[127.0.0.1]:{box.sshd.port}" not in remote.known_hosts.read_text()
    remote.known_hosts.write_text(box.sshd.known_hosts_line() + "\n")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        assert (await run(client, shell, "echo trusted"))["lines"] == ["trusted"]


async def test_a_connection_gone_silent_right_after_an_answer_is_ended_within_one_answer_bound(
    tether_home: Path, remote: RemoteHosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watchdog's bound counts from the command that waits, not from a timer armed for a
    # command answered a moment earlier: ending at twice the bound held the call that long.
    bound = 6.0
    monkeypatch.setattr(control_module, "ANSWER_S", bound)
    box = remote.add("box-a", timeout=3)
    shells = Shells.get(load_config(tether_home))
    stopped: list[int] = []
    try:
        host = shells.hosts["box-a"]
        assert isinstance(host, SshHost)
        await host.connect()
        await host.panes()  # answered: the watchdog was armed for it, and is still set
        assert box.sshd.proc is not None
        stopped = _descendants(box.sshd.proc.pid)  # the connection's side on the host: silent now
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):  # a short-lived one of the host's ended
                os.kill(pid, signal.SIGSTOP)
        asking = asyncio.ensure_future(host.panes())
        with anyio.fail_after(HANG_S):
            while not host.control._pending:
                await asyncio.sleep(0.01)
        # Timers of one loop run in the order of their deadlines, however busy the machine: the
        # watchdog, due one bound after the question was written, runs before this sleep ends. The
        # host answers at once after that; a client not yet ended would take that answer.
        await asyncio.sleep(bound * 1.5)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        with anyio.fail_after(HANG_S), pytest.raises(ConnectionLost, match="did not answer within"):
            await asyncio.shield(asking)
        # The next call starts a new channel, and works.
        with anyio.fail_after(HANG_S):
            assert await host.panes() == {}
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await shells.close()


async def test_the_master_carries_the_mark_of_tethers_own_processes(
    tether_home: Path, remote: RemoteHosts
) -> None:
    # It outlives the call that started it (ControlPersist). Started by a tether that runs in a
    # local shell (the tools process of `tether shell …`), it is that shell's descendant, and the
    # shell's close spares only what carries the mark.
    remote.add("box-a")
    shells = Shells.get(load_config(tether_home))
    try:
        host = shells.hosts["box-a"]
        assert isinstance(host, SshHost)
        await host.connect()
        assert host.conn.master_pid > 0
        with open(f"/proc/{host.conn.master_pid}/environ", "rb") as environ:  # noqa: ASYNC230 - a few bytes
            assert b"\0TETHER_DAEMON=ssh-master\0" in b"\0" + environ.read()
    finally:
        await shells.close()


@pytest.mark.parametrize("bashrc", ["exit 0", "exec true"])
async def test_a_login_that_ends_before_the_command_says_so_not_the_state_directory(
    tether_home: Path, remote: RemoteHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bashrc: str
) -> None:
    # The account's ~/.bashrc ends the session (or replaces it) before ssh's command runs: the
    # probe printed nothing, which is no fact about the state directory there.
    (tmp_path / ".bashrc").write_text(bashrc + "\n")
    monkeypatch.setenv("HOME", str(tmp_path))  # the host's sessions get it (see sshd_harness)
    box = remote.add("box-a", timeout=3)
    async with shell_client(tether_home) as client:
        _, data = await call(client, "shell_open", {"tasks": [{"action": {"kind": "open", "host": "box-a"}}]})
    task = data["tasks"][0]
    assert task["errorCode"] == "HOST_UNSUITABLE", task
    assert "logged in, but the command tether sent never ran" in task["error"], task
    assert "~/.bashrc" in task["error"] and "state directory" not in task["error"], task
    assert task["shell"] is None and not (box.home / "tmux.sock").exists()


# What ssh runs to reach the host (its ProxyCommand, ``%p`` the port): while the gate file exists
# it says so in ``waiting.<pid of its ssh>`` and waits, unless it carries TETHER_TEST_PAST_GATE;
# then it hands ssh a connected socket (``ProxyUseFdpass``).
_GATED_PROXY = """#!/bin/sh
if [ -z "$TETHER_TEST_PAST_GATE" ] && [ -e {gate} ]; then
    : > {dir}/waiting.$PPID
    while [ -e {gate} ]; do sleep 0.02; done
fi
exec {python} -c 'import socket, sys; s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); \\
socket.send_fds(socket.socket(fileno=1), [b"x"], [s.fileno()])' "$1"
"""
# Another tether process of the same home connecting to the host (a CLI call beside the server).
_OTHER_PROCESS = (
    "import asyncio, sys; from pathlib import Path; from tether.config import load_config; "
    "from tether.shells.hosts.ssh.conn import SshConnection; home = Path(sys.argv[1]); "
    "section = next(h for h in load_config(home).hosts if h.name == 'box-a'); "
    "asyncio.run(SshConnection(section, home).ensure())"
)


def _gated_proxy(gated: Path) -> tuple[str, ...]:
    """The options of a host entry that connects through ``_GATED_PROXY``, gated by
    ``gated/gate``."""
    gated.mkdir()
    proxy = gated / "proxy.sh"
    proxy.write_text(_GATED_PROXY.format(gate=gated / "gate", dir=gated, python=sys.executable))
    proxy.chmod(0o755)
    return (f"ProxyCommand={proxy} %p", "ProxyUseFdpass=yes")


def _starting_master(gated: Path) -> bool:
    """The ssh that starts the master (``ssh -N``) waits at the gate."""
    for mark in gated.glob("waiting.*"):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{mark.suffix[1:]}/cmdline").read_bytes().split(b"\0")
            if argv[0] == b"ssh" and b"-N" in argv:
                return True
    return False


@pytest.mark.parametrize("quiet", [(), ("LogLevel=QUIET",)], ids=["default", "loglevel-quiet"])
async def test_a_master_another_ssh_started_meanwhile_is_shared_not_waited_out(
    tmp_path: Path, tether_home: Path, remote: RemoteHosts, quiet: tuple[str, ...]
) -> None:
    """The ssh that starts the master logs in first and only then binds the socket; when another
    ssh bound it meanwhile (another tether process connecting at the same moment, or a channel
    logging in while the connection was down: whichever logs in first becomes the master), ssh
    goes on as a connection of its own, in the foreground, and never ends. The reconnect after a
    drop waited that out for its whole deadline (15 s at the default connect_timeout of the
    tests, seen in about half the drops on an idle machine); now it uses the master that runs.
    ssh says so as an error, which an entry's ``LogLevel=QUIET`` would have silenced."""
    gated = tmp_path / "gated"
    gate = gated / "gate"
    # connect_timeout far above the hang guard: a reconnect that waits out its deadline fails here.
    remote.add("box-a", timeout=HANG_S, options=(*_gated_proxy(gated), *quiet))
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, host="box-a")
        assert (await run(client, shell, "echo up"))["lines"] == ["up"]
        gate.touch()
        _kill_master(remote, "box-a")
        results: list[dict[str, Any]] = []

        async def calls() -> None:
            # The call that meets the drop ends with CONNECTION_LOST; a next one finds the shell.
            while not results or results[-1].get("errorCode") == "CONNECTION_LOST":
                results.append(await run(client, shell, "echo back"))

        with anyio.fail_after(HANG_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(calls)
                while not _starting_master(gated):
                    await anyio.sleep(0.02)
                env = {**os.environ, "TETHER_HOME": str(tether_home), "TETHER_TEST_PAST_GATE": "1"}
                await anyio.run_process([sys.executable, "-c", _OTHER_PROCESS, str(tether_home)], env=env)
                gate.unlink()
        assert results[-1]["exitCode"] == 0 and results[-1]["lines"] == ["back"], results
        assert len(results) <= 2, results  # at most the call that met the drop failed


async def test_a_channel_logs_in_only_through_the_shared_connection(
    tmp_path: Path, tether_home: Path, remote: RemoteHosts
) -> None:
    """A channel that logs in while the master is gone (a spare replaced before the drop is
    noticed) fails with CONNECTION_LOST. It used to log in on its own: as the master
    (``ControlMaster=auto``), racing the reconnect's ``ssh -N``, or — the race lost — as a
    connection of its own, which no later drop of the master ended and whose questions then went
    unanswered for 15 s (seen in the repro of a killed master every few rounds)."""
    gated = tmp_path / "gated"
    # The gate holds the reconnect (no master runs until it opens) and, before the fix, the
    # channel's own login: connect_timeout far above the hang guard makes that wait fail the test.
    remote.add("box-a", timeout=HANG_S, options=_gated_proxy(gated))
    shells = Shells.get(load_config(tether_home))
    try:
        host = shells.hosts["box-a"]
        assert isinstance(host, SshHost)
        await host.connect()
        # A connect warms the control client and the command shell up in the background, and a
        # take primes a spare: let them finish (each logs in on this master) before the spares are
        # dropped; on a loaded machine the warm-up's take came after the drop, and its spare,
        # logged in on the old master, was what the take below got.
        await asyncio.gather(host.control.run("display-message", "-p", "#{pid}"), host.sh.run(":"))
        await host.pool.drop()  # no spare logged in on the old master: the next take logs in now
        (gated / "gate").touch()
        _kill_master(remote, "box-a")
        with anyio.fail_after(HANG_S), pytest.raises(ConnectionLost):
            proc = await host.pool.take("echo on-its-own")
            proc.kill()
            await proc.wait()
        (gated / "gate").unlink()
        # The host noticed the drop, reconnects, and the next channel goes through the new master.
        with anyio.fail_after(HANG_S):
            while True:
                with contextlib.suppress(ConnectionLost):
                    reply = await host.sh.run("echo back")
                    break
                await anyio.sleep(0.02)
        assert reply.out.strip() == "back", reply
    finally:
        await shells.close()
