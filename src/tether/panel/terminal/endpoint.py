"""The terminal WebSocket: a browser's xterm.js on one side, a ``PanelTerminal`` on the other.

Protocol (``/panel/ws/term/<shell>?cols=C&rows=R``):

- server → browser, binary frames: bytes for the terminal, in order — first the pane's scrollback
  above the screen (pushed into xterm's scrollback), then everything the tmux client draws.
- server → browser, text frames: ``{"type": "ping", "every": ms}`` every ``HEARTBEAT_S`` (a page
  that hears nothing for three of them takes the socket for dead and attaches again: after a laptop
  slept or the network dropped, a socket can stay "open" on the page with nothing behind it, and
  keys typed into it were lost without a word); ``{"type": "exit" | "error", "message": …}``
  before the close;
  ``{"type": "notice", "message": …}`` when an input message was cut (over ``MAX_INPUT_CHARS``;
  the page sends a paste in smaller pieces, so its own input never is).
- browser → server, text frames: ``{"type": "input", "data": str, "binary": bool, "typed": bool}``
  and ``{"type": "resize", "cols": int, "rows": int}``. ``typed`` is true only for a person's own
  keystrokes, pastes and clicks — xterm's automatic replies to tmux's queries are not typing.
  Anything else (a binary frame, text that is not such an object) is ignored.

Invariants: the tmux client lives exactly as long as the socket (both directions stop together
and ``PanelTerminal.aclose`` always runs), and no longer than its shell runs (a dead pane ends it);
a keystroke marked ``typed`` stamps the shell's ``@tether_user_input_at`` *before* its bytes reach
the PTY, so an agent write checked after the keystroke landed always sees the person typing. Stamps
are rate-limited: one per ``STAMP_INTERVAL_S`` is enough against a busy window of several seconds.
An Enter typed at the shell's prompt is noted with the socket's person (``note_enter``) before it
reaches the PTY too, so the command timeline can say who ran a line typed here, and audited after it
(``terminal-enter``: who, which shell, where its log was); the keys themselves are never logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from tether.errors import TetherError
from tether.panel.calls import PanelCalls, PanelError, acting_context
from tether.panel.terminal.client import PanelTerminal, clamp_size
from tether.shells import (
    check_shell_id,
    first_paint,
    mark_user_input,
    note_enter,
    session_exists,
    shell_ended,
)

logger = logging.getLogger(__name__)

STAMP_INTERVAL_S = 0.5
HISTORY_LINES = 5000
MAX_INPUT_CHARS = 1 << 20
END_POLL_S = 1.0  # how soon a terminal on a shell whose bash exited says so and ends
HEARTBEAT_S = 15.0  # the terminal's and the events socket's ping; read at each ping (tests shorten it)


async def heartbeats() -> AsyncIterator[str]:
    """A ping at once and every ``HEARTBEAT_S`` after, saying the period: the page's proof that its
    socket still reaches the server (a browser's WebSocket has no ping of its own a page could see).
    The first at once, so a socket cut in its first period is noticed too."""
    while True:
        yield json.dumps({"type": "ping", "every": int(HEARTBEAT_S * 1000)})
        await anyio.sleep(HEARTBEAT_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalEndpoint:
    calls: PanelCalls

    async def serve(self, websocket: WebSocket) -> None:
        shell_id = str(websocket.path_params.get("shell", ""))
        cols, rows = clamp_size(
            _int(websocket.query_params.get("cols"), 120), _int(websocket.query_params.get("rows"), 32)
        )
        await websocket.accept()
        shells = self.calls.engine()
        try:
            check_shell_id(shell_id)
            if not await session_exists(shells, shell_id):
                raise TetherError(
                    f"shell {shell_id} is not running (closed, or never opened)", code="NOT_FOUND"
                )
            if await shell_ended(shells, shell_id):  # its session kept for tether, its bash gone
                raise TetherError(f"shell {shell_id} ended", code="NOT_FOUND")
            history = await first_paint(shells, shell_id, HISTORY_LINES)
            if history:
                # Enough newlines to scroll every history line off the screen before tmux redraws it.
                await websocket.send_bytes(history + b"\r\n" * rows)
            term = await PanelTerminal.open(shells=shells, shell_id=shell_id, cols=cols, rows=rows)
        except (TetherError, PanelError) as exc:
            # Also the race where the shell ends between the check and the attach.
            await _send_control(websocket, "error", exc.message)
            await websocket.close(code=4404, reason=exc.message[:120])
            return
        try:
            host = shells.host_name(shell_id)
            where = "" if host == "local" else f" on host {host}"  # a remote shell's attach names its host
            await self.calls.audit(
                action="terminal-attach", targets=[shell_id], detail=f"{cols}x{rows}{where}"
            )
            sending = anyio.Lock()  # the output and the heartbeat, one frame at a time
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump_output, websocket, term, tg.cancel_scope, sending)
                tg.start_soon(self._watch_end, websocket, term, tg.cancel_scope)
                tg.start_soon(_ping, websocket, sending)
                await self._pump_input(websocket, term, shell_id)
                tg.cancel_scope.cancel()
        except PanelError as exc:  # the audit log cannot be written: no unaudited terminal
            await _send_control(websocket, "error", exc.message)
            await websocket.close(code=1011, reason=exc.message[:120])
        finally:
            with anyio.CancelScope(shield=True):
                await term.aclose()
                try:
                    await self.calls.audit(action="terminal-detach", targets=[shell_id])
                except Exception:
                    logger.exception("could not audit the detach of %s", shell_id)

    async def _pump_output(
        self, websocket: WebSocket, term: PanelTerminal, scope: anyio.CancelScope, sending: anyio.Lock
    ) -> None:
        try:
            while chunk := await term.read():
                async with sending:
                    await websocket.send_bytes(chunk)
        except (WebSocketDisconnect, RuntimeError, OSError):
            scope.cancel()  # the page went away mid-send; the input side ends the same way
            return
        alive = await session_exists(term.shells, term.shell_id)
        await _say_exit(websocket, "detached" if alive else f"shell {term.shell_id} ended", scope)

    async def _watch_end(self, websocket: WebSocket, term: PanelTerminal, scope: anyio.CancelScope) -> None:
        """End the terminal once its shell has ended. A bash that exits leaves a dead pane (tmux's
        ``remain-on-exit``, kept until tether reads it) and the client stays attached to it: the
        page would go on saying "typing goes to the shell" under "Pane is dead"."""
        while True:
            await anyio.sleep(END_POLL_S)
            try:
                ended = await shell_ended(term.shells, term.shell_id)
            except TetherError:  # the host unreachable now: the client's own end says so
                continue
            if ended:
                break
        await _say_exit(websocket, f"shell {term.shell_id} ended", scope)

    async def _pump_input(self, websocket: WebSocket, term: PanelTerminal, shell_id: str) -> None:
        last_stamp = 0.0
        while True:
            try:
                message = await websocket.receive()
            except (WebSocketDisconnect, RuntimeError):
                return
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:  # a binary frame: the page only sends JSON text; ignored, like bad JSON
                continue
            msg = _parse(text)
            if msg is None:
                continue
            if msg.get("type") == "resize":
                term.resize(_int(msg.get("cols"), 80), _int(msg.get("rows"), 24))
            elif msg.get("type") == "input" and isinstance(msg.get("data"), str):
                data: str = msg["data"]
                if len(data) > MAX_INPUT_CHARS:
                    # Cut, and said: never a silent loss of what a person typed or pasted.
                    await _send_control(
                        websocket,
                        "notice",
                        f"input cut: {len(data) - MAX_INPUT_CHARS} of {len(data)} characters were not sent "
                        f"(at most {MAX_INPUT_CHARS} a message)",
                    )
                    data = data[:MAX_INPUT_CHARS]
                raw = (
                    data.encode("latin-1", "replace")
                    if msg.get("binary")
                    else data.encode("utf-8", "replace")
                )
                if msg.get("typed") is True and time.monotonic() - last_stamp >= STAMP_INTERVAL_S:
                    try:
                        await mark_user_input(term.shells, shell_id)
                        last_stamp = time.monotonic()
                    except TetherError:
                        logger.warning("could not stamp user input on %s", shell_id, exc_info=True)
                entered = None
                if msg.get("typed") is True and b"\r" in raw:
                    try:
                        entered = note_enter(term.shells, shell_id, acting_context().audit_actor)
                    except TetherError:  # the timeline then names nobody: the key still goes
                        logger.warning("could not note who pressed Enter on %s", shell_id, exc_info=True)
                await term.write(raw)
                if entered is not None:  # after the key: the person's Enter never waits for the disk
                    await self.calls.audit(
                        action="terminal-enter",
                        targets=[shell_id],
                        detail=f"Enter at the shell's prompt (its log at offset {entered})",
                    )


async def _ping(websocket: WebSocket, sending: anyio.Lock) -> None:
    try:
        async for ping in heartbeats():
            async with sending:
                await websocket.send_text(ping)
    except (WebSocketDisconnect, RuntimeError, OSError):
        return  # the page went away: the input side ends the terminal


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
        return default


def _parse(text: str) -> dict[str, Any] | None:
    try:
        msg = json.loads(text)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


async def _say_exit(websocket: WebSocket, message: str, scope: anyio.CancelScope) -> None:
    """Tell the page why its terminal ended, close the socket, and end the terminal's tasks."""
    try:
        await _send_control(websocket, "exit", message)
        await websocket.close(code=1000, reason=message)
    except Exception:  # the browser may already be gone
        logger.debug("terminal socket closed before the exit notice", exc_info=True)
    scope.cancel()


async def _send_control(websocket: WebSocket, kind: str, message: str) -> None:
    await websocket.send_text(json.dumps({"type": kind, "message": message}))
