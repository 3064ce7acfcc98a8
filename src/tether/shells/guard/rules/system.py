"""Rules about processes, the machine, remote history, and code nobody has read.

Invariant: judged on what runs, not on what is printed: ``echo shutdown`` passes, ``sudo
shutdown`` does not; ``curl … | jq`` passes, ``curl … | sh`` does not. ``fetch-exec`` and
``decode-exec`` look upstream (earlier pipeline stages, ``<(…)``, ``$(…)``) for the command that
produces the code.
"""

from __future__ import annotations

import os
import posixpath
import re
from fnmatch import fnmatchcase

from tree_sitter import Node

from tether.shells.guard.argv import OptSpec, code_source, first_operand
from tether.shells.guard.events import (
    WRITE_OPS,
    DynamicName,
    Event,
    FunctionDef,
    Hidden,
    Invocation,
    Problem,
    Redirect,
)
from tether.shells.guard.rules.rule import Judge, RuleEnv
from tether.shells.guard.walk import invocations_under
from tether.shells.guard.words import Word, resolve

# --- processes and the machine ----------------------------------------------------------------


def fork_bomb(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, FunctionDef):
        return None
    stack = [event.body]
    while stack:
        node = stack.pop()
        if node.type == "command":
            name = node.child_by_field_name("name")
            if name is not None and resolve(name).value == event.name and _forks(node, event.body):
                return f"the function {event.name} starts copies of itself in a pipe or the background"
        stack.extend(node.named_children)
    return None


def _forks(call: Node, body: Node) -> bool:
    node: Node | None = call
    while node is not None and node != body:
        sibling = node.next_sibling
        if node.type == "pipeline" or (sibling is not None and sibling.type == "&"):
            return True
        node = node.parent
    return False


_POWER = frozenset({"shutdown", "reboot", "poweroff", "halt"})
_POWER_VERBS = frozenset({"poweroff", "reboot", "halt", "kexec", "soft-reboot", "emergency", "rescue"})
_POWER_TARGETS = frozenset(f"{verb}.target" for verb in _POWER_VERBS)
_SYSTEMCTL = OptSpec(
    with_arg="tpsHMno",
    long_with_arg=frozenset({"type", "property", "signal", "host", "machine", "lines", "output", "state"})
    | {"root", "kill-whom", "kill-value", "job-mode", "when", "what", "message", "timestamp", "image"},
)


def power_off(event: Event, env: RuleEnv) -> str | None:
    if isinstance(event, Redirect):
        if event.op in WRITE_OPS and event.target.value == "/proc/sysrq-trigger":
            return "writing to /proc/sysrq-trigger (reboots or crashes the machine)"
        return None
    if not isinstance(event, Invocation):
        return None
    values = [word.value for word in event.args]
    if event.name in _POWER:
        if {"--help", "--version"} & set(values) or (event.name == "shutdown" and "-c" in values):
            return None
        return f"{event.name} stops or restarts the machine"
    if event.name in ("init", "telinit") and {"0", "6"} & set(values):
        return f"{event.name} {' '.join(values)} stops or restarts the machine"
    if event.name in ("systemctl", "loginctl"):
        start = first_operand(event.args, _SYSTEMCTL)
        verb = values[start] if start < len(values) else ""
        if verb in _POWER_VERBS or (verb in ("start", "isolate") and _POWER_TARGETS & set(values[start:])):
            return f"{event.name} {verb} stops or restarts the machine"
    return None


_SIGNAL_WITH_ARG = frozenset({"-s", "-n", "--signal"})
_KILL_LISTING = frozenset({"-l", "-L", "--list", "--table"})


def kill_all(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation):
        return None
    if event.name == "killall5":
        return "killall5 signals every process on the machine"
    if event.name != "kill":
        return None
    args = [word.value for word in event.args]
    index = 0
    if args and args[0] in _SIGNAL_WITH_ARG:
        index = 2
    elif args and args[0].startswith("-") and args[0] not in ("--", *_KILL_LISTING):
        index = 1
    if index < len(args) and args[index] == "--":
        index += 1
    if "-1" in args[index:]:
        return "kill with pid -1 signals every process you are allowed to signal, this shell included"
    return None


# --- running code nobody has read -------------------------------------------------------------

FETCHERS = frozenset(
    {"curl", "wget", "fetch", "http", "https", "xh", "xhs", "lwp-request", "GET", "lynx", "w3m", "links"}
    | {"elinks", "nc", "ncat", "netcat", "socat", "aria2c"}
)


def _decodes(event: Invocation) -> bool:
    values = [word.value for word in event.args]
    shorts = "".join(v[1:] for v in values if v.startswith("-") and not v.startswith("--"))
    if event.name in ("base64", "base32", "basenc", "gbase64"):
        return "--decode" in values or "d" in shorts or "D" in shorts
    if event.name == "openssl":
        return "-d" in values
    if event.name == "xxd":
        return "r" in shorts
    return event.name in ("uudecode", "uudeview")


def _runs(node: Node, kind: str) -> bool:
    for found in invocations_under(node, depth=0):
        if not isinstance(found, Invocation):
            continue
        if (kind == "fetch" and found.name in FETCHERS) or (kind == "decode" and _decodes(found)):
            return True
    return False


def _code_nodes(event: Invocation) -> list[Node]:
    """The nodes a program is read from: ``-c`` words, the script operand, or whatever feeds stdin."""
    if event.name in ("source", "."):
        return [w.node for w in event.args[:1] if w.node is not None]
    source = code_source(event.name, event.args)
    if source is None:
        return []
    nodes = [w.node for w in (*source.inline, source.script) if w is not None and w.node is not None]
    if source.stdin:
        nodes += [event.stdin[-1]] if event.stdin else [feeder.node for feeder in event.feeders]
    return nodes


def code_from(kind: str, what: str) -> Judge:
    def judge(event: Event, env: RuleEnv) -> str | None:
        if isinstance(event, DynamicName):
            if event.word.node is not None and _runs(event.word.node, kind):
                return f"runs the output of {what} as a command"
            return None
        if not isinstance(event, Invocation):
            return None
        for node in _code_nodes(event):
            if _runs(node, kind):
                return f"{event.name} runs {what} as code, unseen"
        return None

    return judge


def unparseable(event: Event, env: RuleEnv) -> str | None:
    return f"{event.why}, so the guard cannot tell what it would run" if isinstance(event, Problem) else None


def dynamic_command(event: Event, env: RuleEnv) -> str | None:
    if isinstance(event, Hidden):
        return event.why
    if not isinstance(event, DynamicName):
        return None
    return f"the command name {event.word.code} is only known at run time, so the guard cannot judge it"


# --- tether itself ----------------------------------------------------------------------------


def tether_socket(event: Event, env: RuleEnv) -> str | None:
    """A command that names tether's own tmux socket reaches every shell tether runs (and can end
    them all): ``tmux -S $TETHER_HOME/tmux.sock kill-server``, ``rm ~/.tether/tmux.sock``."""
    if not env.tether_sockets:
        return None
    if isinstance(event, Redirect):
        words: tuple[Word, ...] = (event.target,)
        cwd = ""
    elif isinstance(event, Invocation):
        words, cwd = (*event.args, *event.assigns), event.cwd
    else:
        return None
    for word in words:
        for socket in env.tether_sockets:
            if _names(word.value, socket, cwd):
                return f"it names tether's own tmux socket {socket}, which controls every shell tether runs"
    return None


def _names(value: str, socket: str, cwd: str) -> bool:
    if socket in value:
        return True
    home = os.path.expanduser("~")
    if cwd == "~" or cwd.startswith("~/"):
        cwd = home + cwd[1:]
    for piece in re.split(r"[\s=,:]", value):
        if not piece:
            continue
        path = home + piece[1:] if piece == "~" or piece.startswith("~/") else piece
        if not path.startswith("/") and cwd.startswith("/"):
            path = posixpath.join(cwd, path)
        path = posixpath.normpath(path)
        if path == socket:
            return True
        # A pattern in tether's own directory (tmux.s*, *.sock) may expand to the socket.
        head, tail = posixpath.split(path)
        glob = any(c in tail for c in "*?[") and head == posixpath.dirname(socket)
        if glob and fnmatchcase(posixpath.basename(socket), tail):
            return True
    return False


# --- remote history ---------------------------------------------------------------------------

_GIT_GLOBAL_WITH_ARG = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
)


def git_force_push(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation) or event.name != "git":
        return None
    args = [word.value for word in event.args]
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in _GIT_GLOBAL_WITH_ARG else 1
    if index >= len(args) or args[index] != "push":
        return None
    ended = False
    for value in args[index + 1 :]:
        if ended or not value.startswith("-") or value == "-":
            if value.startswith("+"):
                return f"git push of the forced refspec {value} overwrites remote history"
        elif value == "--":
            ended = True
        elif value.startswith("--"):
            name = value[2:].split("=", 1)[0]
            # git accepts unambiguous prefixes of long options (--force-w = --force-with-lease).
            if name == "mirror" or (
                len(name) >= 3 and ("force".startswith(name) or name.startswith("force-w"))
            ):
                return f"git push {value} overwrites remote history"
            if name == "force":
                return f"git push {value} overwrites remote history"
        elif "f" in value[1:].split("o", 1)[0]:
            return f"git push {value} (force) overwrites remote history"
    return None
