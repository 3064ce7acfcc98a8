"""The few tmux commands the panel runs itself, on the shells' tmux server (``$TETHER_HOME/tmux.sock``).

Invariant: these are display plumbing for the browser terminal only — capturing scrollback to show,
counting attached clients, restoring a window's size, stamping the time a person typed. Every
behaviour an agent can observe (opening, running, reading, locking, closing shells) goes through
``tools/`` and ``shells/``, never through here.

Each call forks one ``tmux`` process (~3 ms); the panel makes them per attach/detach and at most a
few per second while a person types, so a control-mode client would buy nothing here.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import anyio

from tether.errors import NotFoundError, TetherError, UsageError

# Read by the sessions layer (across processes, through tmux) to call a shell ``user-busy`` and to
# refuse agent writes while a person is typing. Epoch milliseconds of the person's latest keystroke.
USER_INPUT_OPTION = "@tether_user_input_at"
# The window size before the first panel client attached, restored when the last one leaves.
RESTORE_SIZE_OPTION = "@tether_panel_restore_size"

_SHELL_ID = re.compile(r"^dsh-[a-z0-9]{1,32}$")


class TmuxCommandError(TetherError):
    code = "TMUX_FAILED"


def check_shell_id(shell_id: str) -> str:
    """A shell id as tmux targets may safely embed it (``dsh-`` + lowercase base-36)."""
    if not _SHELL_ID.match(shell_id):
        raise UsageError(f"shell id {shell_id!r} is not valid; shell ids look like dsh-ab12cd")
    return shell_id


def session_target(shell_id: str) -> str:
    # "=name" matches the session name exactly (no prefix matching); the trailing ":" makes the
    # same string a valid *window* target (the session's current window).
    return f"={check_shell_id(shell_id)}:"


def tmux_argv(socket: Path, *args: str) -> list[str]:
    return ["tmux", "-u", "-S", str(socket), *args]


async def tmux(socket: Path, *args: str) -> str:
    """Run one tmux command; a missing session is ``NotFoundError``, other failures ``TmuxCommandError``."""
    result = await anyio.run_process(tmux_argv(socket, *args), check=False)
    if result.returncode == 0:
        return result.stdout.decode("utf-8", "replace")
    err = result.stderr.decode("utf-8", "replace").strip()
    if "can't find" in err or "no such" in err or "no server running" in err or "error connecting" in err:
        raise NotFoundError(f"no live shell for this target ({err}); list shells with shell_state scope=*")
    raise TmuxCommandError(f"tmux {args[0]} failed: {err or f'exit {result.returncode}'}")


async def session_exists(socket: Path, shell_id: str) -> bool:
    result = await anyio.run_process(
        tmux_argv(socket, "has-session", "-t", f"={check_shell_id(shell_id)}"), check=False
    )
    return result.returncode == 0


async def capture_history(socket: Path, shell_id: str, max_lines: int) -> bytes:
    """The pane's scrollback *above* the visible screen, oldest first, with colours, CRLF-terminated.

    Wrapped lines are joined (``-J``) so the browser re-wraps them at its own width; trailing blanks
    that ``-J`` keeps are stripped for the same reason.
    """
    # With no history, tmux clamps the range onto the visible screen: ask only for what exists.
    size = await tmux(socket, "display-message", "-p", "-t", session_target(shell_id), "#{history_size}")
    lines_above = min(max_lines, int(size.strip() or 0))
    if lines_above <= 0:
        return b""
    text = await tmux(
        socket,
        "capture-pane",
        "-p",
        "-e",
        "-J",
        "-t",
        session_target(shell_id),
        "-S",
        f"-{lines_above}",
        "-E",
        "-1",
    )
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return b""
    body = "\r\n".join(line.rstrip(" ") + "\x1b[0m" for line in lines) + "\r\n"
    return body.encode("utf-8", "replace")


async def terminal_clients(socket: Path, shell_id: str) -> int:
    """How many real (non control-mode) tmux clients are attached to the shell."""
    out = await tmux(
        socket, "list-clients", "-t", f"={check_shell_id(shell_id)}", "-F", "#{client_control_mode}"
    )
    return sum(1 for line in out.splitlines() if line.strip() == "0")


async def window_size(socket: Path, shell_id: str) -> tuple[int, int]:
    out = await tmux(
        socket, "display-message", "-p", "-t", session_target(shell_id), "#{window_width}x#{window_height}"
    )
    cols, _, rows = out.strip().partition("x")
    return int(cols), int(rows)


async def remember_size_for_restore(socket: Path, shell_id: str) -> None:
    """Before the first browser client attaches, note the size the agent (or its last resize) chose."""
    if await terminal_clients(socket, shell_id) > 0:
        return
    cols, rows = await window_size(socket, shell_id)
    await tmux(socket, "set-option", "-t", session_target(shell_id), RESTORE_SIZE_OPTION, f"{cols}x{rows}")


async def restore_size_if_unwatched(socket: Path, shell_id: str) -> None:
    """After the last terminal client left, put the window back to the size noted at first attach.

    ``resize-window`` pins the window to ``window-size manual``; unsetting that window option again
    keeps the new size (tmux only recalculates sizes from attached clients) and lets the next client
    that attaches drive the size as usual.
    """
    if not await session_exists(socket, shell_id) or await terminal_clients(socket, shell_id) > 0:
        return
    out = await tmux(socket, "show-options", "-v", "-q", "-t", session_target(shell_id), RESTORE_SIZE_OPTION)
    cols, _, rows = out.strip().partition("x")
    if not (cols.isdigit() and rows.isdigit()):
        return
    target = session_target(shell_id)
    await tmux(socket, "resize-window", "-t", target, "-x", cols, "-y", rows)
    await tmux(socket, "set-option", "-w", "-u", "-t", target, "window-size")
    await tmux(socket, "set-option", "-u", "-t", session_target(shell_id), RESTORE_SIZE_OPTION)


async def mark_user_input(socket: Path, shell_id: str, at_ms: int | None = None) -> None:
    """Stamp the shell's ``@tether_user_input_at`` with the time a person typed (epoch ms)."""
    stamp = int(time.time() * 1000) if at_ms is None else at_ms
    await tmux(socket, "set-option", "-t", session_target(shell_id), USER_INPUT_OPTION, str(stamp))
