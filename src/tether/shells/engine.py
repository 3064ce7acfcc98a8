"""The persistent-shell engine of one process: tmux sessions, typing, runs and waits.

Invariant: tmux is the daemon. Every shell is a tmux session named by its id on the one server of
this ``TETHER_HOME`` (``tmux -S $TETHER_HOME/tmux.sock``), started with ``pipe-pane`` into its log
and tether's start-up file; nothing here holds a shell's state that tmux, the log or the store
does not also hold, so any process may die and another pick the shells up. One engine exists per
home and event loop (``SessionEngine.get``).

Typing is literal: text goes through ``send-keys -l`` (or ``load-buffer``/``paste-buffer`` above
``PASTE_THRESHOLD`` bytes), key names through ``send-keys``; a pane in copy mode is taken out of it
first. Extension points for locks, the guard and macros (issue 5) are ``SessionHooks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tether.config import Config, ensure_home
from tether.errors import NotFoundError, UsageError
from tether.process.env import scrub_environment
from tether.shells import procinfo
from tether.shells.idle import sweep_forever
from tether.shells.ids import HUB_SESSION, is_shell_id, new_nonce, new_run_id, new_shell_id
from tether.shells.logs import LogWatcher, log_path, log_size
from tether.shells.records import Records, RunRecord, ShellRecord, now_ms
from tether.shells.safety.hooks import SessionHooks
from tether.shells.tmux.control import ControlClient, SessionError
from tether.shells.waits import PaneRef, WaitEngine, WaitSpec
from tether.shells.wrapper import wrap_lines, write_rcfile
from tether.store.db import Store

PASTE_THRESHOLD = 2048
_FIELDS = (
    "#{session_name}",
    "#{pane_id}",
    "#{pane_pid}",
    "#{pane_tty}",
    "#{session_attached}",
    "#{pane_current_path}",
    "#{@tether_user_input_at}",
    "#{window_width}",
    "#{window_height}",
    "#{pane_in_mode}",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PaneInfo:
    shell_id: str
    pane_id: str
    pid: int
    tty: str
    attached: int
    cwd: str
    user_input_ms: int
    cols: int
    rows: int
    in_mode: bool

    def ref(self, logs_dir: Path) -> PaneRef:
        return PaneRef(
            shell_id=self.shell_id, pid=self.pid, tty=self.tty, log=log_path(logs_dir, self.shell_id)
        )


def _parse_pane(line: str) -> PaneInfo | None:
    parts = line.split("\t")
    if len(parts) != len(_FIELDS) or not is_shell_id(parts[0]):
        return None
    try:
        return PaneInfo(
            shell_id=parts[0],
            pane_id=parts[1],
            pid=int(parts[2]),
            tty=parts[3],
            attached=int(parts[4] or 0),
            cwd=parts[5],
            user_input_ms=int(parts[6]) if parts[6].isdigit() else 0,
            cols=int(parts[7] or 0),
            rows=int(parts[8] or 0),
            in_mode=parts[9] == "1",
        )
    except ValueError:
        return None


class SessionEngine:
    """tmux + logs + store for one ``TETHER_HOME``, bound to the running event loop."""

    _instances: ClassVar[dict[tuple[str, int], SessionEngine]] = {}

    def __init__(
        self, config: Config, *, store: Store | None = None, hooks: SessionHooks | None = None
    ) -> None:
        self.config = config
        self.home = ensure_home(config.home)
        self.socket = self.home / "tmux.sock"
        self.logs_dir = self.home / "logs"
        self.control = ControlClient(self.socket, env=scrub_environment(os.environ, config.env))
        self.watcher = LogWatcher(self.logs_dir, cap=config.sessions.log_max_bytes)
        self.waits = WaitEngine(self.watcher)
        self.store = store if store is not None else Store.open(self.home)
        self.records = Records(self.store)
        self.hooks = hooks if hooks is not None else SessionHooks()
        self.rcfile = write_rcfile(self.home)
        self._panes: dict[str, PaneInfo] = {}
        self.ai_busy: dict[str, set[str]] = {}
        self.pending_runs: dict[str, RunRecord] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    def get(cls, config: Config) -> SessionEngine:
        """The engine of ``config.home`` on the running loop (created and started on first use)."""
        loop = asyncio.get_running_loop()
        key = _cache_key(config.home, loop)
        engine = cls._instances.get(key)
        # id() of a closed loop can be reused by a new one: the loop object itself must match.
        if engine is None or engine._closed or engine._loop is not loop:
            engine = cls(config)
            engine._loop = loop
            engine.watcher.start()
            engine._sweeper = loop.create_task(sweep_forever(engine))
            cls._instances[key] = engine
        return engine

    @classmethod
    async def close_home(cls, home: Path) -> None:
        """Close this event loop's engine of ``home`` (if one was started)."""
        loop = asyncio.get_running_loop()
        engine = cls._instances.get(_cache_key(home, loop))
        if engine is not None and engine._loop is loop:
            await engine.close()

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        self.watcher.close()
        await self.control.close()
        for key, engine in list(self._instances.items()):
            if engine is self:
                del self._instances[key]

    # ---- discovery ------------------------------------------------------------------------

    async def live(self) -> dict[str, PaneInfo]:
        """Every live ``dsh-`` shell (one pane each), fresh from tmux (asked after this call began;
        the concurrent callers of one loop iteration share the query)."""
        try:
            lines = await self.control.run_shared("list-panes", "-a", "-F", "\t".join(_FIELDS))
        except SessionError:
            return {}
        panes = {p.shell_id: p for p in map(_parse_pane, lines) if p is not None}
        self._panes = panes
        return panes

    async def pane(self, shell_id: str) -> PaneInfo:
        cached = self._panes.get(shell_id)
        if cached is not None and procinfo.alive(cached.pid):
            return cached
        live = await self.live()
        if shell_id not in live:
            raise NotFoundError(
                f"shell {shell_id} does not exist (it was closed or its process ended); "
                "list live shells with shell_state scope='*'"
            )
        return live[shell_id]

    async def pane_now(self, shell_id: str) -> PaneInfo:
        """One shell's pane read from tmux now (never the cache): what a decision about a person's
        latest keystroke needs. One pane's formats, not every shell's (``live``), so its cost does
        not grow with the number of shells."""
        try:
            lines = await self.control.run_shared(
                "display-message", "-p", "-t", f"={shell_id}:", "\t".join(_FIELDS)
            )
        except SessionError:
            lines = []
        pane = _parse_pane(lines[0]) if lines else None
        if pane is None or pane.shell_id != shell_id:
            raise NotFoundError(
                f"shell {shell_id} does not exist (it was closed or its process ended); "
                "list live shells with shell_state scope='*'"
            )
        self._panes[shell_id] = pane
        return pane

    def ref(self, pane: PaneInfo) -> PaneRef:
        return pane.ref(self.logs_dir)

    def log_of(self, shell_id: str) -> Path:
        return log_path(self.logs_dir, shell_id)

    # ---- open -----------------------------------------------------------------------------

    async def open_shell(
        self,
        *,
        owner: str,
        label: str,
        cwd: str | None,
        cols: int,
        rows: int,
        idle_minutes: int | None,
        preamble: Callable[[str], bytes] | None = None,
    ) -> ShellRecord:
        """Open a shell; ``preamble(new_id)`` (a revived shell's old scrollback) starts its log."""
        start_dir = _start_dir(cwd, self.config.shell.cwd)
        if start_dir is None:
            raise UsageError(f"open.cwd {cwd!r} is not a directory; give an existing directory or omit cwd")
        shell = self.config.sessions.shell or "bash"
        if not Path(shell).name.startswith("bash"):
            raise UsageError(
                f"config.toml: [sessions] shell = {shell!r}; persistent shells run bash (their exit-status "
                "markers are bash functions): set it to 'bash' or a path to a bash executable"
            )
        command = f"exec {_sh_quote(shell)} --rcfile {_sh_quote(str(self.rcfile))} -i"
        known = self.records.known_ids() | set(self._panes)
        for attempt in range(5):
            shell_id = new_shell_id()
            if shell_id in known:
                continue
            log = self.log_of(shell_id)
            log.touch(mode=0o600)
            head = b"" if preamble is None else preamble(shell_id)
            if head:
                log.write_bytes(head)
            # One write: tmux runs both commands before its event loop reads the new pane, so the
            # log gets the shell's very first byte.
            try:
                await self.control.run_many(
                    [
                        (
                            "new-session",
                            "-d",
                            "-s",
                            shell_id,
                            "-x",
                            str(cols),
                            "-y",
                            str(rows),
                            "-c",
                            start_dir,
                            "-e",
                            "PROMPT_COMMAND=__tp",
                            "-e",
                            f"TETHER_SHELL={shell_id}",
                            command,
                        ),
                        ("pipe-pane", "-t", f"={shell_id}:", "-o", f"exec cat >> {_sh_quote(str(log))}"),
                    ]
                )
            except SessionError as exc:
                # Another process took this id in the same instant: draw again.
                if "duplicate session" in exc.message and attempt < 4:
                    continue
                raise
            break
        else:
            raise SessionError("no free shell id after 5 draws (36^6 ids); try again")
        record = ShellRecord(
            id=shell_id,
            owner=owner,
            label=label or shell_id,
            created_ms=now_ms(),
            cwd=start_dir,
            last_activity_ms=now_ms(),
            idle_minutes=idle_minutes,
        )
        self.records.add_shell(record)
        pane = await self.pane(shell_id)
        await self.waits.wait(self.ref(pane), WaitSpec(kind="idle", timeout_ms=10_000), len(head))
        return record

    # ---- typing ---------------------------------------------------------------------------

    async def _leave_copy_mode(self, pane: PaneInfo) -> list[tuple[str, ...]]:
        return [
            (
                "if-shell",
                "-F",
                "-t",
                pane.pane_id,
                "#{pane_in_mode}",
                f"send-keys -X -t {pane.pane_id} cancel",
            )
        ]

    async def type_lines(self, pane: PaneInfo, lines: list[str], *, submit: bool) -> None:
        """Type ``lines`` literally, pressing Enter after each (after the last only if ``submit``).

        Typed, not bracket-pasted: readline redraws a bracketed paste (bash 5.2's active region
        highlights it, then moves the cursor up to repaint it), which the line model of the raw
        log cannot undo — history and search would show each command twice.
        """
        commands = await self._leave_copy_mode(pane)
        text = "\n".join(lines)
        if len(text.encode("utf-8")) > PASTE_THRESHOLD:
            await self._paste(pane, text, submit=submit)
            return
        for i, line in enumerate(lines):
            if line:
                commands.append(("send-keys", "-t", pane.pane_id, "-l", "--", line))
            if submit or i < len(lines) - 1:
                commands.append(("send-keys", "-t", pane.pane_id, "Enter"))
        await self.control.run_many(commands)

    async def _paste(self, pane: PaneInfo, text: str, *, submit: bool) -> None:
        name = "tether-" + secrets.token_hex(6)
        spill = self.home / "spill"
        spill.mkdir(mode=0o700, exist_ok=True)
        path = spill / f"{name}.txt"
        # paste-buffer turns each LF into CR (Enter), so multi-line text submits line by line.
        path.write_text(text + ("\n" if submit else ""), encoding="utf-8")
        try:
            await self.control.run_many(
                [
                    *await self._leave_copy_mode(pane),
                    ("load-buffer", "-b", name, str(path)),
                    ("paste-buffer", "-d", "-b", name, "-t", pane.pane_id),
                ]
            )
        finally:
            path.unlink(missing_ok=True)

    async def send_keys(self, pane: PaneInfo, keys: tuple[str, ...]) -> None:
        if keys:
            await self.control.run_many(
                [*await self._leave_copy_mode(pane), ("send-keys", "-t", pane.pane_id, *keys)]
            )

    # ---- runs -----------------------------------------------------------------------------

    async def await_prompt(self, pane: PaneInfo, timeout: float) -> bool:
        """Wait (briefly) until the shell itself reads a command line; False if something else runs.

        Typing while bash is between commands (terminal still canonical) would be echoed twice,
        once by the terminal and once by readline; so a run waits for readline to take over.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waker = self.watcher.waker(pane.shell_id)
        try:
            step = 0.0005
            while True:
                fg = procinfo.foreground(pane.pid)
                if not fg.shell_in_front:
                    return False
                if procinfo.terminal_canonical(pane.tty) is False:
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                waker.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waker.wait(), min(remaining, step))
                step = min(step * 2, 0.01)
        finally:
            self.watcher.drop(pane.shell_id, waker)

    async def start_run(
        self, pane: PaneInfo, command: str, actor: str, *, wrap: bool = True
    ) -> tuple[RunRecord, int]:
        """Type the command (wrapped with markers when ``wrap``); its record and the log offset."""
        offset = log_size(self.log_of(pane.shell_id))
        run = RunRecord(
            run_id=new_run_id(),
            shell_id=pane.shell_id,
            nonce=new_nonce(),
            command=command,
            actor=actor,
            started_ms=now_ms(),
            log_offset=offset,
            exit_code=None,
            end_offset=None,
            wrapped=wrap,
        )
        # The record is written by the caller once the wait ends (``Records.save_run``): one commit
        # per run. Until then ``pending_runs`` answers for it in this process.
        self.pending_runs[run.run_id] = run
        lines = wrap_lines(command, run.nonce) if wrap else command.split("\n")
        await self.type_lines(pane, lines, submit=True)
        return run, offset

    # ---- screen ---------------------------------------------------------------------------

    async def capture(self, pane: PaneInfo, *, history: int = 0) -> list[str]:
        """The pane as tmux renders it (wrapped lines joined); ``history`` extra scrollback lines."""
        args = ["capture-pane", "-p", "-J", "-t", pane.pane_id]
        if history:
            args += ["-S", f"-{history}"]
        return await self.control.run(*args)

    async def hub_ready(self) -> None:
        await self.control.run("display-message", "-p", "-t", f"={HUB_SESSION}:", "#{session_name}")


def _cache_key(home: Path, loop: asyncio.AbstractEventLoop) -> tuple[str, int]:
    return (str(home.resolve()), id(loop))


def _start_dir(cwd: str | None, configured: str) -> str | None:
    path = Path(cwd).expanduser() if cwd else Path(configured or os.getcwd())
    return str(path) if path.is_dir() else None


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
