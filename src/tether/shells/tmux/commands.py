"""Every tmux command tether sends, built in one place.

Invariant: no other module spells a tmux command, a format or a target. Each builder returns the
argument tuple of one command (``Cmd``) that ``ControlClient.run`` / ``run_many`` send over the
control connection, or, for the few callers that need a separate ``tmux`` process (a person's
terminal in the panel), a whole argv from ``client_argv``. Targets are always exact session
matches (``=dsh-ab12cd:``), never tmux's prefix matching, and a shell id is checked before it is
embedded (``ids.check_shell_id``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tether.shells.ids import HUB_SESSION, check_shell_id, is_shell_id

Cmd = tuple[str, ...]

# Read by the shells layer (across processes, through tmux) to call a shell ``user-busy`` and to
# refuse agent writes while a person is typing: epoch ms of the person's latest keystroke.
USER_INPUT_OPTION = "@tether_user_input_at"
# The window size before the first panel client attached, restored when the last one leaves.
RESTORE_SIZE_OPTION = "@tether_panel_restore_size"

_PANE_FIELDS = (
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
    "#{pane_dead}",
    "#{pane_dead_status}",
    "#{pane_current_command}",
)
PANE_FORMAT = "\t".join(_PANE_FIELDS)
# Without the two fields tmux computes by reading /proc for every pane (the foreground's cwd and
# name): a listing of a few shells costs tmux a third of the time.
_LEAN_FIELDS = tuple(f for f in _PANE_FIELDS if f not in ("#{pane_current_path}", "#{pane_current_command}"))
LEAN_FORMAT = "\t".join(_LEAN_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class PaneInfo:
    """One shell's pane as tmux describes it (``list-panes`` / ``display-message``)."""

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
    dead: bool = False
    dead_status: int | None = None
    command: str = ""  # the name of the terminal's foreground process (tmux's pane_current_command)


def parse_pane(line: str, known: Mapping[str, PaneInfo] | None = None) -> PaneInfo | None:
    """A line of ``PANE_FORMAT``, or of ``LEAN_FORMAT``: its ``cwd`` and ``command`` are then
    those of the same pane (id and pid) in ``known``, else ``""``."""
    parts = line.split("\t")
    if len(parts) == len(_LEAN_FIELDS):
        before = known.get(parts[0]) if known is not None else None
        if before is None or before.pane_id != parts[1] or str(before.pid) != parts[2]:
            cwd, command = "", ""
        else:
            cwd, command = before.cwd, before.command
        parts[5:5] = [cwd]  # pane_current_path
        parts.append(command)  # pane_current_command
    if len(parts) != len(_PANE_FIELDS) or not is_shell_id(parts[0]):
        return None
    try:
        return PaneInfo(
            shell_id=parts[0],
            pane_id=parts[1],
            pid=int(parts[2] or 0),
            tty=parts[3],
            attached=int(parts[4] or 0),
            cwd=parts[5],
            user_input_ms=int(parts[6]) if parts[6].isdigit() else 0,
            cols=int(parts[7] or 0),
            rows=int(parts[8] or 0),
            in_mode=parts[9] == "1",
            dead=parts[10] == "1",
            dead_status=int(parts[11]) if parts[11].lstrip("-").isdigit() else None,
            command=parts[12],
        )
    except ValueError:
        return None


def session(shell_id: str) -> str:
    """The exact target of a shell's session (and, with the colon, its current window)."""
    return f"={check_shell_id(shell_id)}:"


# ---- the server and the hub ---------------------------------------------------------------------


def control_argv(socket: Path) -> list[str]:
    """The control-mode client of a process: attached to the hidden hub session (one idle pane),
    so it receives no ``%output`` of any shell. ``-u``: tmux would turn a tab or a non-ASCII byte of
    a reply into ``_`` for a client whose locale is not UTF-8 (an ssh session often has none)."""
    return [
        "tmux",
        "-u",
        "-S",
        str(socket),
        "-C",
        "new-session",
        "-A",
        "-s",
        HUB_SESSION,
        "-x",
        "80",
        "-y",
        "24",
        "exec sleep 2147483647",
    ]


def version_argv() -> list[str]:
    """``tmux -V`` (a host's tmux version, asked by the shell that probes a remote host)."""
    return ["tmux", "-V"]


def server_pid() -> Cmd:
    return ("display-message", "-p", "#{pid}")


def server_facts() -> Cmd:
    return ("display-message", "-p", "#{pid} #{version}")


def hub_ready() -> Cmd:
    return ("display-message", "-p", "-t", f"={HUB_SESSION}:", "#{session_name}")


def server_options() -> list[Cmd]:
    """Server-wide settings for tether's shells: no status bar inside a terminal, a dead pane kept
    (with its exit status) until tether has read it, and the escape delay of a plain terminal."""
    return [
        ("set-option", "-g", "status", "off"),
        ("set-option", "-g", "remain-on-exit", "on"),
        ("set-option", "-s", "escape-time", "10"),
    ]


# ---- panes ------------------------------------------------------------------------------------------


def list_panes(*, lean: bool = False) -> Cmd:
    return ("list-panes", "-a", "-F", LEAN_FORMAT if lean else PANE_FORMAT)


def list_session_names() -> Cmd:
    return ("list-sessions", "-F", "#{session_name}")


def describe_pane(shell_id: str, *, lean: bool = False) -> Cmd:
    return ("display-message", "-p", "-t", session(shell_id), LEAN_FORMAT if lean else PANE_FORMAT)


def list_clients() -> Cmd:
    return (
        "list-clients",
        "-F",
        "#{client_session}\t#{client_activity}\t#{client_control_mode}\t#{client_created}",
    )


def list_client_pids() -> Cmd:
    return ("list-clients", "-F", "#{client_pid}")


def parse_clients(lines: Sequence[str]) -> dict[str, float]:
    """``list_clients`` lines: the latest keystroke time (epoch s) per session among attached
    non-control clients."""
    latest: dict[str, float] = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) != 4 or parts[2] == "1" or not (parts[1].isdigit() and parts[3].isdigit()):
            continue
        # tmux sets a client's activity when it attaches, and its terminal's automatic answers to
        # tmux's queries arrive within the first second (whole seconds here): not a person typing.
        if int(parts[1]) > int(parts[3]) + 1:
            latest[parts[0]] = max(latest.get(parts[0], 0.0), float(parts[1]))
    return latest


def new_session(
    shell_id: str,
    *,
    cols: int,
    rows: int,
    cwd: str,
    env: Sequence[tuple[str, str]],
    command: str | Sequence[str],
) -> Cmd:
    """``command``: a line for tmux's ``default-shell -c``, or an argv tmux runs itself (no shell
    in between)."""
    args: list[str] = ["new-session", "-d", "-s", check_shell_id(shell_id), "-x", str(cols), "-y", str(rows)]
    args += ["-c", cwd]
    for name, value in env:
        args += ["-e", f"{name}={value}"]
    return (*args, *_command_args(command))


def _command_args(command: str | Sequence[str]) -> list[str]:
    return [command] if isinstance(command, str) else ["--", *command]


# The pane's log writer. ``cat`` alone ends at its first failed write (a full disk): the pipe
# closed, the log stopped for good while the shell ran on, and every later wait of the shell was
# blind. This one waits for room, marks the gap in the log (the bytes ``cat`` held when its write
# failed are gone) and goes on; tmux keeps what the pane prints meanwhile. End of input (the pane
# ended, or ``stop_pipe``) ends it. POSIX sh: a remote host runs it too.
_LOG_GAP = "[tether: output is missing here: the shell's log could not be written (a full disk?)]"
# No ``%`` (tmux expands the command as a time format) and no newline (a control-mode command is a
# line): the note's line ends are written by ``printf``.
_LOG_WRITER = (
    'until cat >>"$0"; do until { printf "\\r\\n" && echo "$1" && printf "\\r"; } >>"$0"; '
    "do sleep 1; done 2>/dev/null; done"
)


def pipe_pane(target: str, log: str) -> Cmd:
    """Pipe everything the pane prints into ``log`` (``target``: ``session(id)`` or a pane id)."""
    writer = f"exec sh -c {sh_quote(_LOG_WRITER)} {sh_quote(log)} {sh_quote(_LOG_GAP)}"
    return ("pipe-pane", "-t", target, "-o", writer)


def stop_pipe(target: str) -> Cmd:
    return ("pipe-pane", "-t", target)


def kill_session(shell_id: str) -> Cmd:
    return ("kill-session", "-t", f"={check_shell_id(shell_id)}")


def respawn_pane(pane_id: str, *, cwd: str | None, command: str | Sequence[str]) -> Cmd:
    args: list[str] = ["respawn-pane", "-k", "-t", pane_id]
    if cwd is not None:
        args += ["-c", cwd]
    return (*args, *_command_args(command))


def resize_window(shell_id: str, cols: int, rows: int) -> Cmd:
    return ("resize-window", "-t", session(shell_id), "-x", str(cols), "-y", str(rows))


def unpin_window_size(shell_id: str) -> Cmd:
    return ("set-option", "-w", "-u", "-t", session(shell_id), "window-size")


def set_session_option(shell_id: str, name: str, value: str) -> Cmd:
    return ("set-option", "-t", session(shell_id), name, value)


def unset_session_option(shell_id: str, name: str) -> Cmd:
    return ("set-option", "-u", "-t", session(shell_id), name)


def show_session_option(shell_id: str, name: str) -> Cmd:
    return ("show-options", "-v", "-q", "-t", session(shell_id), name)


def leave_copy_mode(pane_id: str) -> Cmd:
    return ("if-shell", "-F", "-t", pane_id, "#{pane_in_mode}", f"send-keys -X -t {pane_id} cancel")


def send_key_names(pane_id: str, keys: Sequence[str]) -> Cmd:
    return ("send-keys", "-t", pane_id, *keys)


def send_literal(pane_id: str, text: str) -> Cmd:
    """Printable text as keys (``-l``): the caller guarantees it holds no control character."""
    return ("send-keys", "-t", pane_id, "-l", "--", text)


def send_bytes(pane_id: str, data: bytes) -> Cmd:
    """Exact bytes to the pane's terminal, one hex key each (``-H``)."""
    return ("send-keys", "-t", pane_id, "-H", *(f"{b:02x}" for b in data))


def set_buffer(name: str, data: str) -> Cmd:
    return ("set-buffer", "-b", name, "--", data)


def save_buffer(name: str, path: str) -> Cmd:
    """Write a buffer to a file on the tmux server's machine (how tether puts files on a remote
    host: the bytes travel over the control connection, never on a command line)."""
    return ("save-buffer", "-b", name, path)


def delete_buffer(name: str) -> Cmd:
    return ("delete-buffer", "-b", name)


def paste_buffer(name: str, pane_id: str, *, bracket: bool = False) -> Cmd:
    """Paste and delete a buffer; ``-r`` keeps line feeds as they are (no LF → CR); ``bracket``
    (``-p``) brackets the text when the program asked for bracketed paste."""
    return ("paste-buffer", "-d", *(("-p",) if bracket else ()), "-r", "-b", name, "-t", pane_id)


def capture(pane_id: str, *, history: int = 0, escapes: bool = False, above_only: bool = False) -> Cmd:
    args = ["capture-pane", "-p", "-J", "-t", pane_id]
    if escapes:
        args.append("-e")
    if history:
        args += ["-S", f"-{history}"]
    if above_only:
        args += ["-E", "-1"]
    return tuple(args)


def history_size(shell_id: str) -> Cmd:
    return ("display-message", "-p", "-t", session(shell_id), "#{history_size}")


def window_size(shell_id: str) -> Cmd:
    return ("display-message", "-p", "-t", session(shell_id), "#{window_width}x#{window_height}")


def session_clients(shell_id: str) -> Cmd:
    return ("list-clients", "-t", f"={check_shell_id(shell_id)}", "-F", "#{client_control_mode}")


def pane_alive(pane_id: str) -> Cmd:
    """``PID DEAD`` of one pane (``DEAD`` 1 once its process ended)."""
    return ("display-message", "-p", "-t", pane_id, "#{pane_pid} #{pane_dead}")


def has_session(shell_id: str) -> Cmd:
    return ("has-session", "-t", f"={check_shell_id(shell_id)}")


def attach(shell_id: str) -> Cmd:
    return ("attach-session", "-t", f"={check_shell_id(shell_id)}")


def client_argv(socket: Path, cmd: Cmd) -> list[str]:
    """A separate ``tmux`` process for one command (UTF-8 forced): only for what cannot go over the
    control connection, such as a person's terminal client."""
    return ["tmux", "-u", "-S", str(socket), *cmd]


def sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


# tmux commands after which the server may write a notification to every control client, even
# to one still identifying: a session created or ended, a paste buffer set or deleted, a pane's
# mode changed (``if-shell … send-keys -X cancel`` leaves copy mode), a window or pane replaced.
NOTIFYING = frozenset(
    {
        "new-session",
        "kill-session",
        "kill-server",
        "rename-session",
        "new-window",
        "kill-window",
        "kill-pane",
        "respawn-pane",
        "select-window",
        "set-buffer",
        "delete-buffer",
        "paste-buffer",
        "load-buffer",
        "copy-mode",
        "if-shell",
        "detach-client",
        "switch-client",
    }
)


# Commands a call repeats for each of its shells, the same at every call: the pane's listing, the
# clients' keystrokes, leaving copy mode.
_REPEATED = frozenset({"display-message", "list-clients", "list-panes", "if-shell"})


def repeated(cmd: Cmd) -> bool:
    """Whether ``cmd`` is one a call repeats for each shell, worth keeping its line: a listing,
    leaving copy mode, or the few keys before a run's payload (``send-keys -H`` of at most four
    bytes). Never text typed (``send-keys -l``) nor a paste buffer's data."""
    if not cmd:
        return False
    return cmd[0] in _REPEATED or (cmd[0] == "send-keys" and len(cmd) <= 8 and cmd[3:4] == ("-H",))


def notifies(commands: Iterable[Sequence[str]]) -> bool:
    """Whether any of these tmux commands may notify every control client (typing keys does
    not; ``send-keys -X``, a copy-mode command, may end copy mode)."""
    return any(cmd and (cmd[0] in NOTIFYING or (cmd[0] == "send-keys" and "-X" in cmd)) for cmd in commands)
