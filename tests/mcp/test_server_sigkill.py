"""A SIGKILLed ``tether mcp`` leaves nothing running: its command container dies with it.

Twenty one-shot trees run through a real ``tether mcp`` over stdio (the official SDK client):
plain trees, background jobs, ``setsid`` double forks, the fast ``env -i`` + ``setsid`` escape
(whose root exits at once, so its escapee is nobody's member), double forks with an emptied
environment, and root commands that move themselves out of every cgroup after tether moved them
in. Then the server gets SIGKILL — no handler, no atexit — and every process of the container is
shown dead from /proc: each one's pidfd turns readable (the kernel's event, no sleeping), and a
scan of /proc finds no live process left in the container's PID namespace.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from proc_probe import alive_with, unique_sleep_arg, zombie_children
from tether.process.container import container
from tether.process.tree import become_subreaper, cgroup_root

TETHER = str(Path(sys.executable).parent / "tether")
_V2_ROOT = "/sys/fs/cgroup/unified/cgroup.procs"


def _params(home: Path) -> StdioServerParameters:
    env = {
        "TETHER_HOME": str(home),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        # A worktree's tests run its own source (PYTHONPATH first), in the server too.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    return StdioServerParameters(command=TETHER, args=["mcp"], env=env)


def _in_cgroup(then: str) -> str:
    """Wait until tether has moved this shell into its tree cgroup (it does so 20 ms in), go on."""
    return "until grep -q tether- /proc/self/cgroup; do sleep 0.01; done; " + then


def _move_out(then: str) -> str:
    """In the tree cgroup, leave every cgroup (v2 and each v1 hierarchy) for its root, go on."""
    return _in_cgroup(
        f"for f in {_V2_ROOT} /sys/fs/cgroup/*/cgroup.procs; do echo $BASHPID > $f 2>/dev/null; done; {then}"
    )


def _trees() -> tuple[list[tuple[str, dict[str, object]]], list[str], list[str]]:
    """(label, bash arguments) for 20 trees; every sleep token; the tokens that left their cgroup."""
    trees: list[tuple[str, dict[str, object]]] = []
    tokens: list[str] = []
    moved: list[str] = []

    def add(label: str, command: str, *, background: bool = False, count: int = 2) -> list[str]:
        mine = [unique_sleep_arg() for _ in range(count)]
        tokens.extend(mine)
        args: dict[str, object] = {"command": command.format(*mine), "description": label}
        if background:
            args["run_in_background"] = True
        else:
            args["timeoutMs"] = 300_000
        trees.append((label, args))
        return mine

    for _ in range(4):
        add("plain", "sleep {0} & sleep {1} & wait")
    for _ in range(4):
        add("job", "sleep {0} & (sleep {1} &); wait", background=True)
    for _ in range(3):
        add("setsid double fork", "(setsid sh -c 'sleep {0} &' &); sleep {1}")
    for _ in range(3):
        # Out of the cgroup and without the marker before its root exits at once: nothing the tree
        # tracker can find (the root waits only until that is so, not a moment longer). The
        # pattern is glued to -e: a grep of that loop must not hold the token as a whole argument,
        # which is how the test tells a sleeper (a grep taken for it would be gone by the kill).
        add(
            "fast env -i escape",
            _in_cgroup(
                f"env -i setsid sh -c 'echo $$ > {_V2_ROOT}; exec sleep {{0}}' > /dev/null 2>&1 & p=$!; "
                "until grep -qse{0} /proc/$p/cmdline && ! grep -qs tether- /proc/$p/cgroup; do :; done"
            ),
            count=1,
        )
    for _ in range(2):
        add("env -i double fork", "(env -i sh -c 'setsid sleep {0} > /dev/null 2>&1 &' &); exec sleep {1}")
    for background in (False, False, True, True):
        mine = add(
            "root leaves its cgroup",
            _move_out("(env -i setsid sleep {0} > /dev/null 2>&1 &); exec sleep {1}"),
            background=background,
        )
        # {0} is forked once the root is out, but tether's second sweep of new members may still
        # catch it; {1} is the root itself, which is out for certain.
        moved.append(mine[1])
    assert len(trees) == 20
    return trees, tokens, moved


# Under the test's own 180 s timeout, so that a tree that never started fails with what is known.
_ALIVE_WITHIN_S = 120


async def _until_alive(tokens: list[str], errors: list[BaseException]) -> None:
    with anyio.move_on_after(_ALIVE_WITHIN_S):  # a kernel state with no event to wait on: poll it
        while not errors and not all(alive_with(token) for token in tokens):
            await anyio.sleep(0.02)
    assert errors == [], errors
    assert [token for token in tokens if not alive_with(token)] == []


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _live_in(namespace: str) -> set[int]:
    """Every live process of our /proc whose PID namespace is ``namespace``."""
    return {
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and _pid_ns(int(name)) == namespace and _alive(int(name))
    }


def _describe(pids: object) -> list[str]:
    described = []
    for pid in sorted(pids):  # type: ignore[call-overload]
        try:
            stat = _read(f"/proc/{pid}/stat")
            status = _read(f"/proc/{pid}/status")
            wchan = _read(f"/proc/{pid}/wchan")
            described.append(f"{stat} / {wchan} / {status}")
        except OSError as exc:
            described.append(f"{pid}: {exc}")
    return described


def _reap_orphans(server: int) -> None:
    """Collect the zombies re-parented to us (the subreaper) from the dead server: its command
    roots and its container's PID 1, which waits for every process of its namespace to be
    released. Not the server itself: that is the SDK's child to wait for."""
    for pid in zombie_children() - {server}:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.timeout(180)
async def test_sigkill_of_tether_mcp_leaves_no_survivor(tether_home: Path) -> None:
    if container() is None:
        pytest.skip("this machine cannot create PID namespaces (the README states the limit)")
    assert cgroup_root() is not None, "the cgroup escape needs cgroup v2 to escape from"
    # The server is our child; its orphans (the roots of its commands) come to us when it dies.
    assert become_subreaper()
    trees, tokens, moved = _trees()
    # Foreground calls count as live jobs too; the default limit (16) would refuse some of the 20.
    (tether_home / "config.toml").write_text("[jobs]\nmax_live = 32\n")
    errors: list[BaseException] = []
    killed = False
    try:
        async with Client(_params(tether_home)) as client, anyio.create_task_group() as group:

            async def call(arguments: dict[str, object]) -> None:
                try:
                    result = await client.call_tool("bash", arguments)
                    if result.is_error:
                        errors.append(RuntimeError(str(result.content)))
                except Exception as exc:  # the server is killed under the foreground calls
                    errors.append(exc)

            # The plain trees first: while any tree runs, the container's leftovers are not swept,
            # so the escapees below stay alive until the kill (the state this test is about).
            for index, (_label, arguments) in enumerate(trees):
                if index == 4:
                    await _until_alive(tokens[:8], errors)
                group.start_soon(call, arguments)
            await _until_alive(tokens, errors)
            assert errors == []
            pids = {token: alive_with(token)[0] for token in tokens}
            for token in moved:  # the roots that moved themselves out: no tether cgroup holds them
                cgroups = _read(f"/proc/{pids[token]}/cgroup")
                assert "tether-" not in cgroups, f"the escape did not leave its cgroup: {cgroups}"
            first = psutil.Process(pids[tokens[0]])
            server = next(p for p in first.parents() if "mcp" in p.cmdline())
            namespace = _pid_ns(pids[tokens[0]])
            assert namespace is not None and namespace != _pid_ns(os.getpid())
            # Held open to the end: a freed namespace's number is soon another's (the next test's
            # container), and the last check below must look at this namespace only.
            held_ns = os.open(f"/proc/{pids[tokens[0]]}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            assert _pid_ns(pids[tokens[0]]) == namespace
            assert {_pid_ns(pid) for pid in pids.values()} == {namespace}
            members = _live_in(namespace)
            assert set(pids.values()) <= members
            pidfds = {}
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    pidfds[pid] = os.pidfd_open(pid)
            os.kill(server.pid, signal.SIGKILL)
            # Event-driven: a pidfd turns readable when its process has exited. Meanwhile collect
            # the zombies handed to us: PID 1 of the namespace finishes exiting only once every
            # process of it is released, and a zombie of ours that was never listed (a child
            # forked after the listing) wakes no pidfd — hence the 50 ms bound on each wait.
            deadline = time.monotonic() + 30
            waiting = dict(pidfds)
            while waiting and time.monotonic() < deadline:
                timeout = max(0.0, min(0.05, deadline - time.monotonic()))
                ready, _, _ = select.select(list(waiting.values()), [], [], timeout)
                for fd in ready:
                    pid = next(p for p, f in waiting.items() if f == fd)
                    del waiting[pid]
                    os.close(fd)
                _reap_orphans(server.pid)
            for fd in waiting.values():
                os.close(fd)
            assert not waiting, f"still running after the server's SIGKILL: {_describe(waiting)}"
            group.cancel_scope.cancel()
            killed = True
    except* AssertionError:
        raise
    except* Exception:
        # Leaving the client raises once its server is gone; anything before the kill is a failure.
        if not killed:
            raise
    survivors = [token for token in tokens if alive_with(token)]
    assert survivors == [], f"{len(survivors)} of {len(tokens)} sleepers survived"
    try:
        assert _live_in(namespace) == set()
    finally:
        os.close(held_ns)
    assert not _alive(server.pid)
    print(f"survivors 0 / {len(members)} processes in 20 trees")
