"""Without the sandbox, a shell's ``tmux`` is the user's own, as in a normal terminal: the pane's
environment does not point at tether's server, so ``tmux ls`` lists none of tether's shells and a
new session lands on the user's server; a command naming tether's socket is refused by the guard's
default ``tether-socket`` rule (a speed bump: the sandbox is the boundary)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from shell_harness import call, open_shell, run, shell_client


async def test_a_shells_tmux_is_the_users_own(tether_home: Path, tmp_path: Path) -> None:
    # The user's tmux lives under a directory of this test's own (never the real user's server).
    users = tmp_path / "users-tmux"
    users.mkdir(mode=0o700)
    try:
        async with shell_client(tether_home) as client:
            shell = await open_shell(client)
            other = await open_shell(client)
            env = await run(client, shell, 'echo "tmux=[${TMUX-}] pane=[${TMUX_PANE-}]"')
            assert "tmux=[] pane=[]" in env["lines"], env
            listed = await run(
                client,
                shell,
                f"export TMUX_TMPDIR={users}; tmux new-session -d -s mine; tmux ls; echo ls=$?",
            )
            assert "ls=0" in listed["lines"], listed
            text = "\n".join(listed["lines"])
            assert "mine:" in text and shell not in text and other not in text and "tether-hub" not in text
            # The session the shell made is on the user's server, not on tether's.
            ours = await anyio.run_process(["tmux", "-S", str(tether_home / "tmux.sock"), "ls"], check=False)
            assert b"mine" not in ours.stdout and shell.encode() in ours.stdout

            for command in (
                f"tmux -S {tether_home / 'tmux.sock'} kill-server",
                f"tmux -S {tether_home / 'tmux.sock'} send-keys -t {other} 'touch /tmp/x' Enter",
            ):
                _, data = await call(
                    client,
                    "shell_run",
                    {
                        "tasks": [
                            {"target": {"sessions": shell}, "action": {"kind": "run", "command": command}}
                        ]
                    },
                )
                task = data["tasks"][0]
                assert task["errorCode"] == "BLOCKED" and "tether-socket" in task["error"], task
            # Both shells are still there.
            assert (await run(client, other, "echo still-$((1+1))"))["exitCode"] == 0
    finally:
        user_socket = users / f"tmux-{os.getuid()}" / "default"
        await anyio.run_process(["tmux", "-S", str(user_socket), "kill-server"], check=False)
