"""The few tmux commands the panel runs itself, on the tmux server of the host a shell lives on.

Invariant: these are display plumbing for the browser terminal only — capturing scrollback to show,
counting attached clients, restoring a window's size, stamping the time a person typed. Every
behaviour an agent can observe (opening, running, reading, locking, closing shells) goes through
``tools/`` and ``shells/``, never through here. The commands are built by the shells layer
(``tmux_commands``) and run as the host's own client process (``ShellHost.client_argv``): ``tmux``
here for ``local``, ``ssh`` through the shared connection running ``tmux`` there for a remote host,
so a remote shell is watched and typed into exactly like a local one.

Each call forks one ``tmux`` (or ``ssh``) process (~3 ms here; a round trip on a remote host); the
panel makes them per attach/detach and at most a few per second while a person types, so a
control-mode client would buy nothing here.
"""

from __future__ import annotations

import subprocess
import time

import anyio

from tether.errors import NotFoundError, TetherError
from tether.shells import ShellHost, check_shell_id, tmux_commands

# Read by the sessions layer (across processes, through tmux) to call a shell ``user-busy`` and to
# refuse agent writes while a person is typing. Epoch milliseconds of the person's latest keystroke.
USER_INPUT_OPTION = "@tether_user_input_at"
# The window size before the first panel client attached, restored when the last one leaves.
RESTORE_SIZE_OPTION = "@tether_panel_restore_size"
# ssh's own failure (it cannot reach the host); any other status is the remote tmux's.
_SSH_FAILED = 255


class TmuxCommandError(TetherError):
    code = "TMUX_FAILED"


async def tmux(server: ShellHost, cmd: tuple[str, ...]) -> str:
    """Run one tmux command on the host's server; a missing session is ``NotFoundError``, an
    unreachable host or another failure ``TmuxCommandError``."""
    # stdin is never the panel's own (ssh would forward it to the host).
    result = await anyio.run_process(server.client_argv(cmd), stdin=subprocess.DEVNULL, check=False)
    if result.returncode == 0:
        return result.stdout.decode("utf-8", "replace")
    err = result.stderr.decode("utf-8", "replace").strip()
    if server.name != "local" and result.returncode == _SSH_FAILED:
        raise TmuxCommandError(
            f"cannot reach host {server.name} ({err or 'ssh failed'}); shell_manage doctor checks it"
        )
    if "can't find" in err or "no such" in err or "no server running" in err or "error connecting" in err:
        raise NotFoundError(f"no live shell for this target ({err}); list shells with shell_state scope=*")
    raise TmuxCommandError(
        f"tmux {cmd[0]} failed on host {server.name}: {err or f'exit {result.returncode}'}"
    )


async def session_exists(server: ShellHost, shell_id: str) -> bool:
    try:
        await tmux(server, tmux_commands.has_session(check_shell_id(shell_id)))
    except NotFoundError:
        return False
    return True


async def capture_history(server: ShellHost, shell_id: str, max_lines: int) -> bytes:
    """The pane's scrollback *above* the visible screen, oldest first, with colours, CRLF-terminated.

    Wrapped lines are joined (``-J``) so the browser re-wraps them at its own width; trailing blanks
    that ``-J`` keeps are stripped for the same reason.
    """
    # With no history, tmux clamps the range onto the visible screen: ask only for what exists.
    size = await tmux(server, tmux_commands.history_size(shell_id))
    lines_above = min(max_lines, int(size.strip() or 0))
    if lines_above <= 0:
        return b""
    target = tmux_commands.session(shell_id)
    text = await tmux(
        server, tmux_commands.capture(target, history=lines_above, escapes=True, above_only=True)
    )
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return b""
    body = "\r\n".join(line.rstrip(" ") + "\x1b[0m" for line in lines) + "\r\n"
    return body.encode("utf-8", "replace")


async def terminal_clients(server: ShellHost, shell_id: str) -> int:
    """How many real (non control-mode) tmux clients are attached to the shell."""
    out = await tmux(server, tmux_commands.session_clients(shell_id))
    return sum(1 for line in out.splitlines() if line.strip() == "0")


async def window_size(server: ShellHost, shell_id: str) -> tuple[int, int]:
    out = await tmux(server, tmux_commands.window_size(shell_id))
    cols, _, rows = out.strip().partition("x")
    return int(cols), int(rows)


async def remember_size_for_restore(server: ShellHost, shell_id: str) -> None:
    """Before the first browser client attaches, note the size the agent (or its last resize) chose."""
    if await terminal_clients(server, shell_id) > 0:
        return
    cols, rows = await window_size(server, shell_id)
    await tmux(server, tmux_commands.set_session_option(shell_id, RESTORE_SIZE_OPTION, f"{cols}x{rows}"))


async def restore_size_if_unwatched(server: ShellHost, shell_id: str) -> None:
    """After the last terminal client left, put the window back to the size noted at first attach.

    ``resize-window`` pins the window to ``window-size manual``; unsetting that window option again
    keeps the new size (tmux only recalculates sizes from attached clients) and lets the next client
    that attaches drive the size as usual.
    """
    if not await session_exists(server, shell_id) or await terminal_clients(server, shell_id) > 0:
        return
    out = await tmux(server, tmux_commands.show_session_option(shell_id, RESTORE_SIZE_OPTION))
    cols, _, rows = out.strip().partition("x")
    if not (cols.isdigit() and rows.isdigit()):
        return
    await tmux(server, tmux_commands.resize_window(shell_id, int(cols), int(rows)))
    await tmux(server, tmux_commands.unpin_window_size(shell_id))
    await tmux(server, tmux_commands.unset_session_option(shell_id, RESTORE_SIZE_OPTION))


async def mark_user_input(server: ShellHost, shell_id: str, at_ms: int | None = None) -> None:
    """Stamp the shell's ``@tether_user_input_at`` with the time a person typed (epoch ms)."""
    stamp = int(time.time() * 1000) if at_ms is None else at_ms
    await tmux(server, tmux_commands.set_session_option(shell_id, USER_INPUT_OPTION, str(stamp)))
