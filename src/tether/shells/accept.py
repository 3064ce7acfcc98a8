"""The moment a shell is about to read a line: judge what it will run, then press the key.

Invariant: no key that makes a shell run a line (``Enter`` and its aliases, the run keys) is sent
by an agent's write before the guard (``WriteDecision.judge``) has judged that line as the shell
will read it:

- at the prompt of the pane's own shell, with what the shell reported it has defined
  (``guard.shellstate``: written before every prompt, or asked for — the *reporter* — when the
  guard needs a function's body, or for a line assembled on readline's line by ``shell_send``
  pieces, keys or a person: the reporter answers with the exact line);
- a line the guard finds *incomplete* (an open heredoc, quote, ``if``…) is not accepted: a newline
  is added to readline's line instead, and the whole command is judged once complete, so bash
  never holds half a command the guard has not seen (a PS2 prompt it did not cause is refused);
- text typed while a program runs in front with the terminal in line mode (``sleep``, ``cat``, a
  builtin's ``read``) may be read by the shell once the program ends (type-ahead), so every line
  it completes — with what earlier sends typed there — is judged before anything is typed,
  leniently (only what is plainly dangerous); into a nested shell, strictly. A program that reads
  keys itself (a REPL, an editor, ``ssh``: the terminal out of line mode) gets its input unjudged.

A blocked line typed onto readline's line is cleared, so nobody runs it by pressing Enter.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import NotFoundError, RefusedError, UsageError
from tether.shells.domain import Shells
from tether.shells.guard import ShellState, dump_key, parse_dump
from tether.shells.host import ShellHost
from tether.shells.integration import payload
from tether.shells.integration.events import EventScanner
from tether.shells.integration.script import ACCEPT_KEYS, INSERT_KEYS, LOAD_KEYS, REPORT_KEYS, RUN_KEYS
from tether.shells.integration.tracker import Activity
from tether.shells.logs import log_size, read_range
from tether.shells.prompt import settled
from tether.shells.safety.hooks import WriteDecision
from tether.shells.tmux.commands import PaneInfo

_REPORT_TIMEOUT_S = 5.0
# The reporter answers after bash has read what was typed before it, which the loader's ``read``
# takes from the terminal unbuffered: up to 4 s a megabyte on a busy 2-core machine.
_REPORT_S_PER_MB = 10.0
_READ_CHUNK = 1 << 20
# Keys that make readline accept the line (tmux names, compared in lower case).
_ACCEPT = frozenset({"enter", "kpenter", "c-m", "c-j", "^m", "^j", "0xd", "0x0d", "0xa", "0x0a", "c-o", "^o"})
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_CHAR_KEYS = {"space": " ", "tab": "\t"}


def is_accept_key(key: str) -> bool:
    return key.lower() in _ACCEPT


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPlan:
    """How to type a run: ``keys`` then ``text`` (``held``: the command waits on the line)."""

    keys: bytes
    text: str
    notes: tuple[str, ...] = ()
    held: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    line: str
    state: ShellState | None


# ---- what the shell reported ----------------------------------------------------------------------

# By ``dump_key``: from one prompt to the next a dump changes only in its clockwork lines.
_parsed: dict[str, ShellState | None] = {}


def _parse(data: bytes | None) -> ShellState | None:
    key = dump_key(data) if data is not None else None
    if key is None or data is None:
        return None
    found = _parsed.get(key, ...)
    if found is ...:
        found = parse_dump(data)
        if len(_parsed) >= 16:
            _parsed.pop(next(iter(_parsed)))
        _parsed[key] = found
    return found if isinstance(found, ShellState) else None


def snapshot(shells: Shells, host: ShellHost, shell_id: str) -> ShellState | None:
    """The state the shell wrote before its current prompt."""
    return _parse(host.read_state(shell_id))


def capable(host: ShellHost, shell_id: str) -> bool:
    """The shell's integration writes its state (and so has the reporter)."""
    return host.read_state(shell_id) is not None


async def report(
    shells: Shells, host: ShellHost, pane: PaneInfo, keys: bytes = b"", text: str = "", *, typed: int = 0
) -> Report:
    """Type ``keys`` + ``text`` (a line for readline), then ask the reporter; its answer.
    ``typed``: how many characters were typed just before (the reporter answers after them)."""
    nonce = shells.nonce_of(pane.shell_id)
    if nonce is None:
        raise RefusedError(f"shell {pane.shell_id} has no shell integration; the guard cannot read its line")
    seq = secrets.token_hex(4)
    log = host.log_of(pane.shell_id)
    scanner = EventScanner(nonce, log_size(log))
    waker = host.watcher.waker(pane.shell_id)
    try:
        if keys or text:
            await host.type_keys_then_text(pane, keys, text)
        await host.type_keys_then_text(pane, REPORT_KEYS, payload.report_payload(seq))
        allowed = _REPORT_TIMEOUT_S + _REPORT_S_PER_MB * (typed + len(text)) / 1e6
        deadline = time.monotonic() + allowed
        while True:
            waker.clear()
            while scanner.pos < log_size(log):
                for ev in scanner.feed(read_range(log, scanner.pos, scanner.pos + _READ_CHUNK)):
                    if ev.kind == "L" and ev.seq == seq:
                        state = _parse(host.read_state(pane.shell_id, report=True))
                        return Report(
                            line=payload.decode_quoted(ev.text),
                            state=state,
                        )
                    if ev.kind == "X":
                        raise NotFoundError(
                            f"shell {pane.shell_id} has ended; open a new one with shell_open"
                        )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RefusedError(
                    f"shell {pane.shell_id} did not show the guard its command line within "
                    f"{allowed:.3g} s; nothing was run. Retry, or clear the line with keys ['C-u']"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waker.wait(), timeout=remaining)
    finally:
        host.watcher.drop(pane.shell_id, waker)


async def clear(host: ShellHost, pane: PaneInfo) -> None:
    """Empty readline's line (a blocked line must not wait there for someone's Enter)."""
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.run_payload(0, ""))


async def hold(host: ShellHost, pane: PaneInfo) -> None:
    """An incomplete line: a newline on readline's line instead of accepting it."""
    await host.type_keys_then_text(pane, LOAD_KEYS, payload.append_payload("\n"))


# A query whose answer readline cannot tell from keys: tmux answers a cursor-position or status
# report (CSI 6n / 5n) with digits that land on the command line (DA, XTVERSION and colour
# answers are swallowed by the integration's own key bindings).
_QUERIES = re.compile(rb"\x1b\[\??[56]n")
_LOOK_BACK = 256 * 1024


def _answers_pending(host: ShellHost, shell_id: str, activity: Activity) -> bool:
    """The last command printed such a query: what readline holds now is its answer, not typing."""
    if activity.event is None:
        return False
    log = host.log_of(shell_id)
    end = activity.event.start
    tail = read_range(log, max(0, end - _LOOK_BACK), end)
    start = tail.rfind(b"\x1b]6973;")  # the previous event of the shell: where that command began
    while start >= 0 and b";C;" not in tail[start : start + 64]:
        start = tail.rfind(b"\x1b]6973;", 0, start)
    return _QUERIES.search(tail, max(start, 0)) is not None


# ---- runs and steps ---------------------------------------------------------------------------------


async def plan_run(
    shells: Shells, host: ShellHost, pane: PaneInfo, decision: WriteDecision, token: int, command: str = ""
) -> RunPlan:
    """Judge a run at the prompt (the shell's last state; the reporter when a function is called)."""
    text = command or decision.text
    judged = command or decision.judged or decision.text
    typed = payload.run_payload(token, text, decision.variables)
    verdict = await decision.judge(judged, snapshot(shells, host, pane.shell_id))
    if verdict.needs:
        # Put the line there (nothing runs), ask for every definition, judge again.
        answer = await report(shells, host, pane, LOAD_KEYS, typed)
        try:
            verdict = await decision.judge(judged, answer.state, final=True)
        except BaseException:
            await clear(host, pane)
            raise
        if verdict.incomplete:
            held = payload.held_payload(text + "\n", decision.variables)
            await host.type_keys_then_text(pane, LOAD_KEYS, held)
            return RunPlan(keys=b"", text="", notes=verdict.notes, held=verdict.incomplete)
        return RunPlan(keys=ACCEPT_KEYS, text="", notes=verdict.notes)
    if verdict.incomplete:
        # On the line with a newline after it, as if Enter had been pressed: the next line continues it.
        return RunPlan(
            keys=LOAD_KEYS,
            text=payload.held_payload(text + "\n", decision.variables),
            notes=verdict.notes,
            held=verdict.incomplete,
        )
    return RunPlan(keys=RUN_KEYS, text=typed, notes=verdict.notes)


# ---- sends and text for a program in front -----------------------------------------------------------


def _lines(carry: str, items: Sequence[tuple[str, str]]) -> tuple[list[str], str]:
    """What typing ``items`` after ``carry`` would submit, line by line, and what stays unsubmitted
    (editing keys are simulated roughly: BSpace, C-u, C-c)."""
    lines: list[str] = []
    current = carry
    for kind, item in items:
        if kind == "text":
            parts = item.replace("\r", "\n").split("\n")
            for part in parts[:-1]:
                lines.append(current + part)
                current = ""
            current += parts[-1]
            continue
        key = item.lower()
        if key in _ACCEPT:
            lines.append(current)
            current = ""
        elif key in ("bspace", "c-h", "^h"):
            current = current[:-1]
        elif key in ("c-u", "^u", "c-c", "^c"):
            current = ""
        elif key in _CHAR_KEYS:
            current += _CHAR_KEYS[key]
        elif len(item) == 1 and item.isprintable():
            current += item
    return lines, current


async def judge_typed(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    decision: WriteDecision,
    items: Sequence[tuple[str, str]],
) -> tuple[str, ...]:
    """Text and keys for a program in front: judge every line they would complete (with what
    earlier writes typed there) before a byte is typed; remember what stays unsubmitted."""
    fg = await host.foreground(pane)
    nested = not fg.shell_in_front and fg.command in _SHELLS
    if not nested and await host.line_mode(pane) is False:
        shells.typed_ahead.pop(pane.shell_id, None)  # the program in front reads every key itself
        return ()
    shell_itself = fg.shell_in_front  # a builtin of the shell reads (read, a hook): shell text
    carry = shells.typed_ahead.get(pane.shell_id, "")
    lines, rest = _lines(carry, items)
    notes: list[str] = []
    for line in lines:
        if line.strip():
            verdict = await decision.judge(line, None, lenient=not (nested or shell_itself), final=True)
            notes.extend(verdict.notes)
    if rest:
        shells.typed_ahead[pane.shell_id] = rest[-4096:]
    else:
        shells.typed_ahead.pop(pane.shell_id, None)
    return tuple(notes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    notes: tuple[str, ...] = ()
    held: str | None = None


async def send(
    shells: Shells,
    host: ShellHost,
    pane: PaneInfo,
    decision: WriteDecision,
    pre_keys: Sequence[str],
    keys: Sequence[str],
    *,
    buffer: str,
) -> Sent:
    """Type a ``shell_send``: ``pre_keys``, the text, ``keys``; every accept key at the shell's
    prompt becomes: report the line, judge it, accept (or hold, or clear and refuse)."""
    text = decision.text
    items: list[tuple[str, str]] = [("key", k) for k in pre_keys]
    if text:
        items.append(("text", text))
    items.extend(("key", k) for k in keys)
    shell_id = pane.shell_id
    activity = await settled(shells, host, pane) if not decision.typed_secret else None
    at_prompt = activity is not None and activity.phase in ("prompt", "continuation")
    fg = await host.foreground(pane)
    if not (at_prompt and fg.shell_in_front and capable(host, shell_id)):
        if decision.variables:
            raise UsageError(
                "vault references are delivered only to a shell at its prompt; here a program runs in "
                "front: type the value into its own prompt instead (a reference alone is typed as the value)"
            )
        typed = await judge_typed(shells, host, pane, decision, items) if not decision.typed_secret else ()
        await _type_plain(host, pane, items, decision, buffer=buffer, loader=False)
        return Sent(notes=typed)
    shells.typed_ahead.pop(shell_id, None)
    if activity is not None and activity.phase == "prompt" and _answers_pending(host, shell_id, activity):
        await clear(host, pane)
    notes: list[str] = []
    held: str | None = None
    batch: list[tuple[str, str]] = []
    for index, (kind, item) in enumerate(items):
        if kind == "key" and is_accept_key(item):
            await _type_plain(host, pane, batch, decision, buffer=buffer, loader=True)
            before = sum(len(text) for kind, text in batch if kind == "text")
            batch = []
            answer = await report(shells, host, pane, typed=before)
            pending = shells.activity(shell_id)
            try:
                verdict = await decision.judge(
                    answer.line,
                    answer.state,
                    pending=pending is not None
                    and pending.phase == "continuation"
                    and bool(answer.line.strip()),
                    final=True,
                )
            except BaseException:
                await clear(host, pane)
                raise
            notes.extend(verdict.notes)
            if verdict.incomplete:
                await hold(host, pane)
                held = verdict.incomplete
                continue
            held = None
            shells.accepted[shell_id] = log_size(host.log_of(shell_id))
            await host.type_keys_then_text(pane, ACCEPT_KEYS, "")
            rest = items[index + 1 :]
            if rest:
                # The line runs now: what follows is input for whatever is in front by then.
                notes.extend(await judge_typed(shells, host, pane, decision, rest))
                await _type_plain(host, pane, rest, decision, buffer=buffer, loader=False)
            return Sent(notes=tuple(notes))
        batch.append((kind, item))
    await _type_plain(host, pane, batch, decision, buffer=buffer, loader=True)
    return Sent(notes=tuple(notes), held=held)


async def _type_plain(
    host: ShellHost,
    pane: PaneInfo,
    items: Sequence[tuple[str, str]],
    decision: WriteDecision,
    *,
    buffer: str,
    loader: bool,
) -> None:
    """Keys as keys; text through the loader (a shell's prompt) or a paste buffer (a program)."""
    keys: list[str] = []
    for kind, item in items:
        if kind == "key":
            keys.append(item)
            continue
        await host.send_keys(pane, keys)
        keys = []
        if loader and not decision.typed_secret:
            await host.type_keys_then_text(
                pane, INSERT_KEYS, payload.insert_payload(item, decision.variables)
            )
        else:
            await host.type_raw(pane, payload.to_bytes(item), buffer=f"{buffer}-{secrets.token_hex(2)}")
    await host.send_keys(pane, keys)
