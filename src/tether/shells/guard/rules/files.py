"""Rules about files and disks: deleting, re-permissioning, truncating, writing onto devices.

Invariant: paths are judged on their text only (``paths``); a dynamic path is judged as if
its unknown parts were empty, and the reason then says so.
"""

from __future__ import annotations

from tether.shells.guard.argv import command_name, find_parts
from tether.shells.guard.events import WRITE_OPS, Event, Invocation, Redirect
from tether.shells.guard.rules.paths import (
    block_device,
    device_target,
    is_root,
    protected_target,
    system_file,
)
from tether.shells.guard.rules.rule import RuleEnv
from tether.shells.guard.words import Word


def _dyn(word: Word) -> str:
    return f" (when the unknown parts of {word.code} expand to nothing)" if word.dynamic else ""


# --- deletion ---------------------------------------------------------------------------------


def recursive_delete(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation):
        return None
    if event.name == "rsync":
        return _rsync_delete(event, env)
    if event.name != "rm":
        return None
    recursive, operands, ended = False, [], False
    for word in event.args:
        value = word.value
        if ended or value == "-" or not value.startswith("-"):
            operands.append(word)
        elif value == "--":
            ended = True
        elif value.startswith("--"):
            # GNU getopt accepts any unambiguous prefix: --rec is --recursive.
            recursive = recursive or "recursive".startswith(value[2:].split("=", 1)[0])
        else:
            recursive = recursive or "r" in value or "R" in value
    if not recursive:
        return None
    for word in operands:
        reason = protected_target(word.value, env.protect, cwd=event.cwd)
        if reason is not None:
            return f"recursive deletion of {reason}{_dyn(word)}"
    return None


def _rsync_delete(event: Invocation, env: RuleEnv) -> str | None:
    # `rsync -a --delete empty/ /` empties the destination as surely as rm -rf.
    values = [word.value for word in event.args]
    if not any(v.startswith("--del") for v in values):
        return None
    operands = [word for word in event.args if not word.value.startswith("-")]
    if len(operands) < 2:
        return None
    reason = protected_target(operands[-1].value, env.protect, cwd=event.cwd)
    return f"rsync --delete making {reason} a copy of {operands[0].value}" if reason else None


_DELETERS = frozenset({"rm", "unlink", "shred"})


def find_delete(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation) or event.name != "find":
        return None
    roots, expression = find_parts(event.args)
    values = [word.value for word in expression]
    deleting = "-delete" in values
    for index, value in enumerate(values):
        if value in ("-exec", "-execdir", "-ok", "-okdir"):
            segment = expression[index + 1 :]
            deleting = deleting or any(command_name(word) in _DELETERS for word in segment[:3])
    if not deleting:
        return None
    for root in roots:
        reason = protected_target(root.value, env.protect, cwd=event.cwd)
        if reason is not None:
            return f"find deleting files throughout {reason}{_dyn(root)}"
    return None


# --- disks and devices ------------------------------------------------------------------------


def dd_device(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation) or event.name != "dd":
        return None
    for word in event.args:
        if word.value.startswith("of=") and device_target(word.value[3:]):
            return f"dd writing straight onto the device {word.value[3:]}"
    return None


_DEVICE_WRITERS_ANY = frozenset({"tee", "shred", "wipefs", "blkdiscard", "mkswap", "badblocks", "sgdisk"})
_DEVICE_WRITERS_LAST = frozenset({"cp", "mv", "install", "rsync", "pv"})


def block_device_write(event: Event, env: RuleEnv) -> str | None:
    if isinstance(event, Redirect):
        if event.op in WRITE_OPS and block_device(event.target.value):
            return f"redirecting output onto the block device {event.target.value}"
        return None
    if not isinstance(event, Invocation):
        return None
    operands = [w for w in event.args if not w.value.startswith("-") or w.value == "-"]
    if event.name in _DEVICE_WRITERS_ANY:
        targets = operands
    elif event.name in _DEVICE_WRITERS_LAST:
        targets = operands[-1:] if len(operands) > 1 else []
    else:
        return None
    for word in targets:
        if block_device(word.value):
            return f"{event.name} writing onto the block device {word.value}"
    return None


# --- permissions and system files -------------------------------------------------------------

_CHMOD_FLAGS = frozenset("cfvR")
_CHOWN_FLAGS = frozenset("cfvRhHLP")


def chmod_chown(event: Event, env: RuleEnv) -> str | None:
    if not isinstance(event, Invocation) or event.name not in ("chmod", "chown", "chgrp"):
        return None
    flags = _CHMOD_FLAGS if event.name == "chmod" else _CHOWN_FLAGS
    recursive, reference, ended, operands = False, False, False, []
    for word in event.args:
        value = word.value
        if not ended and value == "--":
            ended = True
        elif not ended and value.startswith("--"):
            recursive = recursive or value == "--recursive"
            reference = reference or value.startswith("--reference")
        elif not ended and value.startswith("-") and len(value) > 1 and set(value[1:]) <= flags:
            recursive = recursive or "R" in value
        else:
            operands.append(word)  # includes chmod's mode, even one like -w
    for word in operands if reference else operands[1:]:
        if recursive:
            reason = protected_target(word.value, env.protect, homes=False, cwd=event.cwd)
            if reason is not None:
                return f"recursive {event.name} of {reason}{_dyn(word)}"
        elif is_root(word.value, event.cwd):
            return f"{event.name} of the root directory /{_dyn(word)}"
    return None


def truncate_system_file(event: Event, env: RuleEnv) -> str | None:
    if isinstance(event, Redirect):
        if event.op in (">", ">|", "&>") and system_file(event.target.value):
            return f"truncating the system file {event.target.value}"
        return None
    if isinstance(event, Invocation) and event.name == "truncate":
        for word in event.args:
            if system_file(word.value):
                return f"truncating the system file {word.value}"
    return None
