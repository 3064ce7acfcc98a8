"""What a person's terminal on a shell needs from its host: attach, first paint, size, typing stamp.

Invariant: these are display plumbing for a person's terminal client (the panel's browser
terminal) — whether the session exists, the scrollback to paint before the client draws, how many
terminal clients watch, the window size to give back when the last one leaves, the stamp that
says a person is typing, and the note of who pressed Enter at the prompt (``note_enter``), which
names them in the command timeline. Every behaviour an agent can observe (opening, running,
reading, locking, closing shells) goes through the operations and the tools, never through here.
Each function goes through the shell's host (``Shells.host_of``), so a shell on another host is
watched the same way; the commands come from ``tmux.commands`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from tether.errors import NotFoundError, TetherError
from tether.shells.domain import Shells
from tether.shells.ids import check_shell_id
from tether.shells.logs import log_size
from tether.shells.tmux import commands
from tether.shells.tmux.control import SessionError


async def session_exists(shells: Shells, shell_id: str) -> bool:
    """The shell's tmux session exists on its host (its pane may have ended)."""
    host = shells.host_of(check_shell_id(shell_id))
    try:
        await host.control.run(*commands.has_session(shell_id))
    except SessionError:
        return False
    return True


async def shell_ended(shells: Shells, shell_id: str) -> bool:
    """The shell no longer runs: its session is gone, or its pane is dead — tmux keeps a dead pane
    (``remain-on-exit``) after ``exit`` until tether reads it, and a terminal client attached to
    it stays attached to nothing."""
    try:
        pane = await shells.host_of(check_shell_id(shell_id)).pane_now(shell_id)
    except NotFoundError:
        return True
    return pane.dead


def attach_argv(shells: Shells, shell_id: str) -> list[str]:
    """The argv of a real, read-write terminal client for one shell (run it in a PTY)."""
    return shells.host_of(check_shell_id(shell_id)).attach_argv(shell_id)


async def prepare_attach(shells: Shells, shell_id: str) -> None:
    """Before a person's client attaches: no status bar in the session (tether's server sets it
    off globally; a session made by an older tether, or on a server tether did not start, may
    still have one), and the window size noted for ``restore_size`` when no client watches yet."""
    if not await session_exists(shells, shell_id):
        raise NotFoundError(f"shell {shell_id} is not running (closed, or never opened)")
    host = shells.host_of(shell_id)
    watching = await terminal_clients(shells, shell_id)
    cmds = [commands.set_session_option(shell_id, "status", "off")]
    if watching == 0:
        cols, rows = await window_size(shells, shell_id)
        cmds.append(commands.set_session_option(shell_id, commands.RESTORE_SIZE_OPTION, f"{cols}x{rows}"))
    await host.control.run_many(cmds)


async def first_paint(shells: Shells, shell_id: str, max_lines: int) -> bytes:
    """The pane's scrollback *above* the visible screen, oldest first, colours kept, each line
    CRLF-terminated: what a fresh terminal shows before the client's own redraw of the screen.

    Wrapped lines are joined (``-J``) so the terminal re-wraps them at its own width; the trailing
    blanks ``-J`` keeps are stripped for the same reason, and each line ends with an SGR reset so
    a colour left open does not bleed into the next line."""
    host = shells.host_of(check_shell_id(shell_id))
    size = await host.control.run(*commands.history_size(shell_id))
    # With no history, tmux clamps the range onto the visible screen: ask only for what exists.
    above = min(max_lines, int(size[0].strip() or 0) if size and size[0].strip().isdigit() else 0)
    if above <= 0:
        return b""
    lines = await host.control.run(
        *commands.capture(commands.session(shell_id), history=above, escapes=True, above_only=True)
    )
    if not lines:
        return b""
    body = "\r\n".join(line.rstrip(" ") + "\x1b[0m" for line in lines) + "\r\n"
    return body.encode("utf-8", "replace")


async def terminal_clients(shells: Shells, shell_id: str) -> int:
    """How many real (non control-mode) tmux clients are attached to the shell."""
    host = shells.host_of(check_shell_id(shell_id))
    try:
        out = await host.control.run(*commands.session_clients(shell_id))
    except SessionError:
        return 0
    return sum(1 for line in out if line.strip() == "0")


@contextlib.asynccontextmanager
async def terminal_ending(shells: Shells, shell_id: str) -> AsyncIterator[None]:
    """Around the end of a person's terminal client of the shell: tmux tells every control client
    that it left, which must not meet one still connecting (``tmux.gate``), so the gate is held
    until tmux no longer counts the client (at most ``ENDING_WAIT_S``)."""
    host = shells.host_of(check_shell_id(shell_id))

    async def count() -> int:
        try:
            return await terminal_clients(shells, shell_id)
        except TetherError:  # the host unreachable: nothing to wait for there
            return 0

    async with host.control.gate.shared():
        before = await count()
        yield
        deadline = time.monotonic() + ENDING_WAIT_S
        while before and await count() >= before and time.monotonic() < deadline:
            await asyncio.sleep(0.005)


ENDING_WAIT_S = 1.0


async def window_size(shells: Shells, shell_id: str) -> tuple[int, int]:
    """(cols, rows) of the shell's window."""
    host = shells.host_of(check_shell_id(shell_id))
    out = await host.control.run(*commands.window_size(shell_id))
    cols, _, rows = (out[0] if out else "").strip().partition("x")
    return int(cols or 0), int(rows or 0)


async def restore_size(shells: Shells, shell_id: str) -> None:
    """After the last terminal client left, give the window back the size noted when the first one
    attached (``prepare_attach``). Nothing to do while a client still watches or the shell is gone.

    ``resize-window`` pins the window to ``window-size manual``; unsetting that window option keeps
    the new size (tmux recalculates sizes only from attached clients) and lets the next client that
    attaches drive the size as usual."""
    if not await session_exists(shells, shell_id) or await terminal_clients(shells, shell_id) > 0:
        return
    host = shells.host_of(shell_id)
    out = await host.control.run(*commands.show_session_option(shell_id, commands.RESTORE_SIZE_OPTION))
    cols, _, rows = (out[0] if out else "").strip().partition("x")
    if not (cols.isdigit() and rows.isdigit()):
        return
    await host.control.run_many(
        [
            commands.resize_window(shell_id, int(cols), int(rows)),
            commands.unpin_window_size(shell_id),
            commands.unset_session_option(shell_id, commands.RESTORE_SIZE_OPTION),
        ]
    )


async def mark_user_input(shells: Shells, shell_id: str, at_ms: int | None = None) -> None:
    """Stamp the shell's ``@tether_user_input_at`` with the time a person typed (epoch ms): the
    ``user-busy`` test (``safety.user_busy``) reads it, in every process, to refuse agent writes."""
    host = shells.host_of(check_shell_id(shell_id))
    stamp = int(time.time() * 1000) if at_ms is None else at_ms
    await host.control.run(*commands.set_session_option(shell_id, commands.USER_INPUT_OPTION, str(stamp)))


def note_enter(shells: Shells, shell_id: str, actor: str) -> int | None:
    """A person at a terminal of tether's (``actor``: ``panel:alice``, or ``panel`` for whoever
    holds the serve token) is about to press Enter on the shell: noted, with the size of the
    shell's log now, when the shell reads a line (its prompt, or the rest of an unfinished one). The
    command that line runs starts further on in the log, after the prompt it was typed at, and the
    timeline names as its typist the last person noted between the two (``timeline``). Called
    before the key reaches the terminal. An Enter for a program in front (an editor, a REPL) is not
    noted: no command of the shell's can follow from it. Returns the log offset noted (``None``:
    not noted)."""
    activity = shells.activity(check_shell_id(shell_id))
    if activity is None or activity.phase not in ("prompt", "continuation"):
        return None
    offset = log_size(shells.log_of(shell_id))
    shells.records.note_enter(shell_id, actor, offset)
    return offset


async def user_input_stamp(shells: Shells, shell_id: str) -> int | None:
    """The shell's ``@tether_user_input_at`` (epoch ms), or ``None`` when no person typed yet."""
    host = shells.host_of(check_shell_id(shell_id))
    out = await host.control.run(*commands.show_session_option(shell_id, commands.USER_INPUT_OPTION))
    text = (out[0] if out else "").strip()
    return int(text) if text.isdigit() else None
