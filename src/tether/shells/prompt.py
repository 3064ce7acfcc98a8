"""Getting a shell to the point where a command can be typed: its prompt.

Invariant: a command is typed through the loader only when the shell's last own event is a
prompt (``P``): then readline reads, and the line is exactly the command. Otherwise the shell
is asked what is in front of its terminal:

- the shell itself (its prompt hooks, or a builtin) — wait for the prompt, within the budget;
  keys for what is in front (``settled``) wait while the shell is still starting its running
  line's command (working in front itself, or its fork in front not yet the command);
- the shell itself reading a line without reporting it — the integration was lost (``exec bash``
  replaced the shell): it is installed again, invisibly to ``history``, and then the prompt is
  awaited. Only into a bash: a shell whose own process another program replaced (``exec zsh``, a
  ~/.bashrc's ``exec tmux``) gets nothing typed, and is reported as that program in front;
- another program (a REPL, an editor, ``ssh``, a nested shell) — the caller decides (text goes
  to that program as input, never as a run with an exit status);
- an unfinished line (PS2) — the caller refuses: finishing someone's line is not running a command.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tether.errors import NotFoundError
from tether.shells import ids
from tether.shells.domain import Shells
from tether.shells.host import ShellHost
from tether.shells.hosts import Confinement, rc_text
from tether.shells.integration.tracker import Activity
from tether.shells.logs import log_size
from tether.shells.records import closed_meanwhile
from tether.shells.tmux.commands import PaneInfo, sh_quote
from tether.shells.waits import ShellReplaced, WaitSpec

_LOST_QUIET_S = 0.3  # the shell reads a line this long without a prompt event: integration lost
_LOST_LOOK_S = 0.5
_PROMPT_COMING_MS = 3000  # a prompt on its way (see ``settled``) is awaited this long
_HOOKS_S = 0.05  # a shell's prompt hooks usually take less: then the foreground is not looked at
_SYNC_S = 2.0  # a program in front of a running line: the log is proven caught up within this
_STARTING_POLL_S = 0.005  # how often a shell still starting its line's command is looked at again

Where = Literal["prompt", "program", "continuation", "exited"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Readiness:
    where: Where
    activity: Activity | None
    program: str = ""  # "program": the foreground program's name
    waited_ms: int = 0
    detail: str = ""


async def ready(shells: Shells, host: ShellHost, pane: PaneInfo, budget_ms: int) -> Readiness:
    """Wait (up to ``budget_ms``) until the shell is at its prompt, or say what holds it."""
    t0 = time.monotonic()
    deadline = t0 + budget_ms / 1000
    reinstalled = False
    hooks_awaited = False
    synced = False
    while True:
        activity = shells.activity(pane.shell_id)
        if activity is None and await _bash_in_front(shells, host, pane):
            await reinstall(shells, host, pane)  # opened before shell integration existed
            reinstalled = True
            activity = shells.activity(pane.shell_id)
        waited = int((time.monotonic() - t0) * 1000)
        if activity is not None and activity.phase == "prompt":
            return Readiness(where="prompt", activity=activity, waited_ms=waited)
        if activity is not None and activity.phase == "continuation":
            return Readiness(where="continuation", activity=activity, waited_ms=waited)
        if activity is not None and activity.phase == "exited":
            return Readiness(where="exited", activity=activity, waited_ms=waited)
        if activity is not None and activity.phase == "hooks" and not hooks_awaited:
            # The last command ended (a run that waited for its exit returns there): its prompt
            # hooks are about to draw the prompt; only hooks still running after that are looked at.
            hooks_awaited = True
            budget = min(_HOOKS_S, max(deadline - time.monotonic(), 0.0))
            await _prompt_after(shells, host, pane, activity, budget)
            continue
        fg = await host.foreground(pane)
        replaced = fg.shell_in_front and bool(fg.command) and not _is_bash(shells, fg.command)
        if replaced and activity is not None and activity.event is not None:
            # bash has spoken in this pane, so what runs in its place replaced it (``exec zsh``);
            # before that, the pane may still be starting it.
            detail = _replaced(fg.command)
            return Readiness(
                where="program", activity=activity, program=fg.command, waited_ms=waited, detail=detail
            )
        if not fg.shell_in_front and activity is not None and activity.phase in ("typed", "hooks"):
            # Keys of ours are on their way to the shell, or its own prompt hooks run (a program
            # there is the shell's, not a command in front): the prompt is coming.
            fg = replace(fg, shell_in_front=True)
        if not fg.shell_in_front and activity is not None and activity.phase == "running" and not synced:
            # The log lags the terminal (tmux pipes the pane to it): the line may have ended and its
            # prompt hooks started a program (a PROMPT_COMMAND running `sleep`) while its end is
            # still on the way. Once the log is proven caught up, it says which it is.
            synced = True
            if await host.sync_log(pane, within=max(min(deadline - time.monotonic(), _SYNC_S), 0.01)):
                continue
        if not fg.shell_in_front:
            if not await host.alive(pane):
                return Readiness(where="exited", activity=activity, waited_ms=waited)
            return Readiness(where="program", activity=activity, program=fg.command, waited_ms=waited)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Readiness(
                where="program",
                activity=activity,
                program=fg.command,
                waited_ms=waited,
                detail=_replaced(fg.command)
                if replaced
                else f"the shell did not reach its prompt within {budget_ms} ms (its prompt hooks run)",
            )
        if activity is not None and activity.phase == "running" and await host.starting(pane):
            await _started(host, pane, remaining)  # its line's next command may take the terminal
            continue
        if not reinstalled and await recover(shells, host, pane):
            reinstalled = True
            continue
        await _prompt_after(shells, host, pane, activity, min(remaining, _LOST_LOOK_S))


async def settled(
    shells: Shells, host: ShellHost, pane: PaneInfo, budget_ms: int = _PROMPT_COMING_MS
) -> Activity | None:
    """The shell's activity once what is on its way is there: the prompt after keys of ours it
    has not taken yet, or after the prompt hooks of a command that ended (typing now would be
    type-ahead); while a line runs, the command it starts (see ``_started``)."""
    activity = shells.activity(pane.shell_id)
    if activity is not None and activity.phase in ("typed", "hooks"):
        activity = (await ready(shells, host, pane, budget_ms)).activity
    elif activity is not None and activity.phase == "running":
        await _started(host, pane, budget_ms / 1000)
    return activity


async def _started(host: ShellHost, pane: PaneInfo, budget_s: float) -> None:
    """Wait up to ``budget_s`` while the shell is still starting what its running line runs
    (``procinfo.starting``). bash forks a command, hands it the terminal, and the fork then resets
    the shell's signal handlers and becomes the command; a ``C-c`` before that reaches a bash
    handler (the shell's, or the fork's), and the command never sees it. A shell that computes on
    its own (a loop of builtins) gets the key once the budget (3 s for ``shell_send``) is spent."""
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline and await host.starting(pane):
        await asyncio.sleep(_STARTING_POLL_S)  # nothing announces the moment a command has started


async def _prompt_after(
    shells: Shells, host: ShellHost, pane: PaneInfo, activity: Activity | None, budget_s: float
) -> None:
    """Wait up to ``budget_s`` for a prompt after the one ``activity`` shows."""
    nonce = shells.nonce_of(pane.shell_id)
    spec = WaitSpec(kind="prompt", timeout_ms=int(budget_s * 1000) + 1)
    start = activity.event.end if activity is not None and activity.event is not None else 0
    shown = activity.prompt if activity is not None else -1
    await shells.waits(host).wait(pane, spec, start, nonce=nonce, shown_prompt=shown)


# What a program that holds the terminal usually waits for, and the keys that let it go.
_WAITS_FOR = {
    "less": 'a key: send "q" (shell_send keys ["q"]) to leave it',
    "more": 'a key: send "q" (shell_send keys ["q"]) to leave it',
    "most": 'a key: send "q" (shell_send keys ["q"]) to leave it',
    "man": 'a key: send "q" (shell_send keys ["q"]) to leave it',
    "top": 'a key: send "q" to leave it',
    "htop": 'a key: send "q" (or F10) to leave it',
    "vi": 'editing: send keys ["Escape"], then ":q!" and ["Enter"] to leave without saving',
    "vim": 'editing: send keys ["Escape"], then ":q!" and ["Enter"] to leave without saving',
    "nvim": 'editing: send keys ["Escape"], then ":q!" and ["Enter"] to leave without saving',
    "nano": 'editing: send keys ["C-x"] to leave it',
    "python3": 'input at its prompt (a REPL): type with shell_send, leave with exit() or keys ["C-d"]',
    "python": 'input at its prompt (a REPL): type with shell_send, leave with exit() or keys ["C-d"]',
    "node": 'input at its prompt (a REPL): type with shell_send, leave with keys ["C-d"]',
    "ssh": "a password, a host-key answer, or commands of the remote shell: type with shell_send",
    "sudo": "a password: type it with shell_send (a vault reference types its value)",
    "cat": 'input: it copies what is typed until keys ["C-d"]',
}


async def front_note(host: ShellHost, pane: PaneInfo) -> str | None:
    """After a wait timed out: what holds the terminal, if it is not the shell, and how to go on."""
    fg = await host.foreground(pane)
    if fg.shell_in_front or not fg.command:
        return None
    # The group's leader may be a program that started a pager (git log → less): the newest
    # member with a known habit is the one that reads the terminal.
    for name in reversed([fg.command, *await host.group_names(pane, fg.pgid)]):
        hint = _WAITS_FOR.get(name)
        if hint is not None:
            return f"[{name} is in front of the shell and is probably waiting for {hint}]"
    return (
        f"[{fg.command} is in front of the shell: it is still running, or waiting for input "
        "(shell_read mode=screen shows what it shows; shell_send types into it)]"
    )


def _is_bash(shells: Shells, name: str) -> bool:
    """Whether a process named ``name`` (``/proc``'s 15-character ``comm``) is the shell tether
    started, or a bash an ``exec bash`` put in its place: the only shell the integration speaks."""
    return name == "bash" or name == Path(shells.config.sessions.shell or "bash").name[:15]


def _replaced(name: str) -> str:
    return (
        f"the shell itself is now {name}: its start-up files or a command replaced bash with it "
        "(exec), and tether runs commands in bash only; type into it with shell_send, or close the "
        "shell. A ~/.bashrc that execs another shell or tmux can leave tether's shells alone: "
        '[ -n "$TETHER_SHELL" ] || exec …'
    )


async def integration_lost(shells: Shells, host: ShellHost, pane: PaneInfo) -> bool:
    """The shell in front reads a line in readline's mode without having said so: ``exec bash``
    replaced it. Decided from the log itself where the host can sync it (everything the terminal
    printed before a mark written to it now is in the log once the mark is): a prompt event that
    is merely late never counts as lost. Elsewhere, a quiet period stands in for the mark. Only a
    bash counts: a program that put the terminal in raw mode in the shell's place (``exec tmux``
    from ~/.bashrc, ``exec zsh``) would get the integration typed into it."""
    if await host.reading_line(pane) is not True or not await _bash_in_front(shells, host, pane):
        return False
    synced = await host.sync_log(pane)
    if not synced:
        size = log_size(host.log_of(pane.shell_id))
        await asyncio.sleep(_LOST_QUIET_S)
        if log_size(host.log_of(pane.shell_id)) != size:
            return False
    activity = shells.activity(pane.shell_id)
    if activity is not None and activity.phase == "prompt":
        return False
    return await host.reading_line(pane) is True


async def _bash_in_front(shells: Shells, host: ShellHost, pane: PaneInfo) -> bool:
    fg = await host.foreground(pane)
    return fg.shell_in_front and _is_bash(shells, fg.command)


async def recover_run(shells: Shells, host: ShellHost, pane: PaneInfo) -> bool:
    """``recover`` for the wait of a run that has started, so bash has spoken in this pane: a
    program in its own process's place replaced it (``exec sh`` typed as the run; ``ShellReplaced``
    is raised), as there is nothing to install the integration into."""
    fg = await host.foreground(pane)
    if not fg.shell_in_front:
        return False
    if fg.command and not _is_bash(shells, fg.command):
        raise ShellReplaced(fg.command, _replaced(fg.command))
    return await recover(shells, host, pane)


async def recover(shells: Shells, host: ShellHost, pane: PaneInfo) -> bool:
    """Install the integration again if it was lost; whether it was."""
    if not await integration_lost(shells, host, pane):
        return False
    await reinstall(shells, host, pane)
    return True


async def reinstall(shells: Shells, host: ShellHost, pane: PaneInfo) -> None:
    """Install the integration into the shell reading at its prompt (a new nonce), with one line
    that removes itself from history; then wait for the prompt it draws."""
    rec = shells.record(pane.shell_id)
    if rec is None:
        if shells.records.closed(pane.shell_id):
            raise closed_meanwhile(pane.shell_id)
        raise NotFoundError(f"shell {pane.shell_id} has no record: it was not opened by tether")
    # The same nonce: a wait already following the shell's events keeps recognising them.
    nonce = rec.nonce or ids.new_nonce()
    # The same start-up file it opened with (a confined shell's marks and state place included).
    path = await host.write_rc(pane.shell_id, rc_text(nonce, Confinement.from_json(rec.confinement)))
    shells.set_nonce(pane.shell_id, nonce)
    offset = log_size(host.log_of(pane.shell_id))
    await host.type_line(pane, f" . {sh_quote(path)} --integration")
    spec = WaitSpec(kind="prompt", timeout_ms=5000)
    await shells.waits(host).wait(pane, spec, offset, nonce=nonce)
