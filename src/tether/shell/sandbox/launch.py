"""Opening the descriptors a bubblewrap command line needs, here or in a pane tmux starts.

Invariant: a plan (strings, ``OpenDir``, ``FilterProgram``) becomes an argv only once every
directory in it has been opened from ``/`` one component at a time with ``O_NOFOLLOW`` — so a
writable bind (``--bind-fd``) always mounts the directory at that path, never what a symlink
swapped in by a concurrent command points to — and every filter program sits in a pipe.

This file imports nothing from tether on purpose: a persistent shell's pane command is run by the
tmux server, which cannot inherit descriptors from tether, so the pane runs this file as a script
(``python -I launch.py SPEC``) to open them where bubblewrap starts. ``SPEC`` is a JSON file
written by ``sandbox.interactive``; importing the tether package there would cost the shell's
start-up 100 ms for nothing. bubblewrap is exec'd without tmux's ``TMUX`` and ``TMUX_PANE``
(``DROPPED_ENV``: they name tmux's socket, and bubblewrap is the sandbox's readable pid 1), nor
the mark of tether's own processes, which the tmux server carries.
When the spec names bounds (``bounds``), the launcher joins the shell's cgroups right before the
exec (``join_groups``), so the shell's whole tree is born inside them.
When the spec names a trace (``collect``), the launcher first forks the collector of
``sandbox.collect`` (loaded from its file beside this one, never through ``sys.path``: this
directory holds a ``trace.py``, a standard-library name), which outlives the exec and ends with it;
before it, the keeper of ``sandbox.keeper`` for the mounts the spec lists in ``keep`` (a keeper that
cannot watch them stops the start).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True, slots=True)
class OpenDir:
    """A plan item: the descriptor of the directory at ``path``, opened without following symlinks."""

    path: str


@dataclass(frozen=True, slots=True)
class FilterProgram:
    """A plan item: the descriptor of a pipe holding a seccomp program."""

    program: bytes


PlanItem = str | OpenDir | FilterProgram
# tmux names its server's socket in every pane's environment. Not for the sandbox: bubblewrap's own
# process is the sandbox's pid 1, whose /proc/1/environ everything inside can read. Nor the mark of
# tether's own processes, which tmux's server has (``tether.process.adopt.OWN_PROCESS``).
DROPPED_ENV = frozenset({"TMUX", "TMUX_PANE", "TETHER_DAEMON"})
KEEPER_ENDED_IT = 3  # ``--keep``'s exit status when the keeper ended the sandbox


def open_directory(path: str) -> int:
    """An ``O_PATH`` fd of the directory at ``path``, reached without following any symlink."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.strip("/").split("/"):
            if part:
                inner = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def filter_fd(program: bytes) -> int:
    """A pipe whose read end holds ``program`` (bubblewrap reads it once at start-up).

    The write end is closed here, so bubblewrap sees end-of-file after the program.
    """
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(write_end, program)  # a few hundred bytes: far below the pipe buffer
    finally:
        os.close(write_end)
    return read_end


def materialise(plan: Sequence[PlanItem]) -> tuple[tuple[str, ...], list[int]]:
    """The argv of ``plan`` with every descriptor opened (the caller passes and later closes them)."""
    argv: list[str] = []
    fds: list[int] = []
    try:
        for item in plan:
            if isinstance(item, str):
                argv.append(item)
                continue
            fd = open_directory(item.path) if isinstance(item, OpenDir) else filter_fd(item.program)
            fds.append(fd)
            argv.append(str(fd))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return tuple(argv), fds


def encode(plan: Sequence[PlanItem]) -> list[object]:
    """``plan`` as JSON values: strings stay, ``{"dir": path}``, ``{"filter": hex}``."""
    out: list[object] = []
    for item in plan:
        if isinstance(item, OpenDir):
            out.append({"dir": item.path})
        elif isinstance(item, FilterProgram):
            out.append({"filter": item.program.hex()})
        else:
            out.append(item)
    return out


def decode(values: Sequence[object]) -> list[PlanItem]:
    plan: list[PlanItem] = []
    for value in values:
        if isinstance(value, str):
            plan.append(value)
        elif isinstance(value, dict) and isinstance(value.get("dir"), str):
            plan.append(OpenDir(value["dir"]))
        elif isinstance(value, dict) and isinstance(value.get("filter"), str):
            plan.append(FilterProgram(bytes.fromhex(value["filter"])))
        else:
            raise ValueError(f"not a plan item: {value!r}")
    return plan


# The files the launcher runs: itself and what it loads by path (``_load``).
_OWN_FILES: tuple[tuple[str, ...], ...] = (
    ("launch.py",),
    ("collect.py",),
    ("keeper.py",),
    (os.pardir, os.pardir, "inotify.py"),
)


def _own_files() -> tuple[tuple[int, int], ...]:
    """The mtime and size of each of ``_OWN_FILES`` as they are now ((0, 0): absent)."""
    here = os.path.dirname(os.path.abspath(__file__))
    stamps = []
    for parts in _OWN_FILES:
        try:
            st = os.stat(os.path.join(here, *parts))
        except OSError:
            stamps.append((0, 0))
        else:
            stamps.append((st.st_mtime_ns, st.st_size))
    return tuple(stamps)


# As the server found them when it imported this module (as its tools loaded).
_FOUND = _own_files()


def replaced() -> bool:
    """Whether the launcher's files are no longer those the server found at its start: tether was
    upgraded under it, and a pane or a keeper would run a later build's launcher with this
    server's plan (a later build may read what this one never writes)."""
    return _own_files() != _FOUND


def _load(name: str, *parts: str) -> ModuleType:
    """The file at ``parts`` (relative to this one's directory) as a module, never through
    ``sys.path``."""
    path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts))
    spec = importlib.util.spec_from_file_location(f"_tether_sandbox_{name}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_collector(collect: object) -> None:
    """Fork the trace collector named by a spec's ``collect`` entry (``fifo``, ``runs``, ``nonce``)."""
    if not isinstance(collect, dict) or not all(
        isinstance(collect.get(k), str) for k in ("fifo", "runs", "nonce")
    ):
        raise ValueError(f"not a trace collector: {collect!r}")
    module = _load("collect", "collect.py")
    _detached(lambda watched: module.collect(collect["fifo"], collect["runs"], collect["nonce"], watched))


def _check_keep(keep: object) -> None:
    if not isinstance(keep, list) or not all(
        isinstance(e, list) and len(e) == 2 and all(isinstance(v, str) for v in e) for e in keep
    ):
        raise ValueError(f"not a list of kept mounts: {keep!r}")


def start_keeper(keep: object) -> None:
    """Fork the keeper of the mounts a spec's ``keep`` entry lists (``[[path, kind], ...]``); its
    watches are opened here first, so that a machine out of inotify instances stops the start."""
    _check_keep(keep)
    module = _load("keeper", "keeper.py")
    keeper = module.Keeper(keep)
    if not keeper.entries:
        return
    keeper.watch(_load("inotify", os.pardir, os.pardir, "inotify.py"))
    try:
        _detached(lambda watched: module.keep(keeper, watched), keep_fd=keeper.fd)
    finally:
        os.close(keeper.fd)


def keep_command(spec: object) -> int:
    """Keep the mounts of a one-shot command's running sandbox (``launch.py --keep``, the spec on
    its standard input: ``keep`` as above, ``covered`` each path's ``[device, inode]`` when
    bubblewrap's mounts were planned — what changed since is mounted again at once — and ``pid``,
    bubblewrap's). In this process, until bubblewrap exits: 0 then, ``KEEPER_ENDED_IT`` when the
    keeper had to end the sandbox (or could not watch)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("pid"), int):
        raise ValueError(f"not a keeper spec: {spec!r}")
    keep, covered = spec.get("keep"), spec.get("covered")
    _check_keep(keep)
    if not isinstance(covered, dict):
        raise ValueError(f"not the covered identities: {covered!r}")
    module = _load("keeper", "keeper.py")
    idents = {path: tuple(ident) if isinstance(ident, list) else None for path, ident in covered.items()}
    keeper = module.Keeper(keep, idents)
    if not keeper.entries:
        return 0
    try:
        keeper.watch(_load("inotify", os.pardir, os.pardir, "inotify.py"))
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(spec["pid"], signal.SIGKILL)  # fail closed: unkept, the command does not go on
        return KEEPER_ENDED_IT
    try:
        return 0 if module.keep(keeper, spec["pid"]) else KEEPER_ENDED_IT
    except ProcessLookupError:
        return 0  # the command ended before its keeper started
    finally:
        os.close(keeper.fd)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def join_groups(bounds: object) -> None:
    """Create the shell's bounding groups (``tether.process.bounds.shell_plan``: ``groups``, each
    ``[directory, [[file, value], ...]]``), set their limits and move this process in, so that
    bubblewrap and everything the shell starts are born inside. Through v1's ``tasks`` with ``0``:
    this process has one thread, and a thread moving itself costs the kernel no global lock."""
    if not isinstance(bounds, dict) or not isinstance(bounds.get("groups"), list):
        raise ValueError(f"not a plan of bounds: {bounds!r}")
    for entry in bounds["groups"]:
        directory, pairs = entry
        for attempt in range(3):
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o755)
                for name, value in pairs:
                    _write(os.path.join(directory, name), str(value))
                _write(os.path.join(directory, "tasks"), "0")
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise  # removed again and again: something else owns these groups
                # A sweep removed the empty group between its mkdir and the join: make it again.


def _detached(body: Callable[[int], None], *, keep_fd: int = -1) -> None:
    """Run ``body(pid of this process)`` in a forked child of its own session that holds no
    descriptor of the pane but ``keep_fd``, ignores the terminal's signals, and exits after it
    (this process goes on to exec bubblewrap: ``body`` watches it)."""
    watched = os.getpid()
    if os.fork() != 0:
        return
    try:
        os.setsid()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        if keep_fd >= 0:
            os.closerange(3, keep_fd)
            os.closerange(keep_fd + 1, 1 << 16)
        else:
            os.closerange(3, 1 << 16)
        body(watched)
    finally:
        os._exit(0)


def main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[1] == "--keep":
        try:
            return keep_command(json.load(sys.stdin))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"tether: cannot keep the command's sandbox: {exc}", file=sys.stderr)
            return 2
    if len(argv) != 2:
        print("usage: launch.py SPEC | launch.py --keep < SPEC-JSON", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as handle:
            spec = json.load(handle)
        plan = decode(spec["plan"])
        if spec.get("keep"):
            start_keeper(spec["keep"])
        if spec.get("collect") is not None:
            start_collector(spec["collect"])
        args, fds = materialise(plan)
        if spec.get("bounds") is not None:
            join_groups(spec["bounds"])  # last: the keeper and the collector stay outside the bound
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Printed in the pane: the shell never starts unconfined.
        print(f"tether: cannot start the confined shell: {exc}", file=sys.stderr)
        return 1
    for fd in fds:
        os.set_inheritable(fd, True)
    env = {name: value for name, value in os.environ.items() if name not in DROPPED_ENV}
    try:
        os.execve(args[0], list(args), env)
    except OSError as exc:
        print(f"tether: cannot start bubblewrap ({args[0]}): {exc}", file=sys.stderr)
    return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv))
