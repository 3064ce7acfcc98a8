"""Spawning one command and driving it to a settled state on the asyncio event loop.

Invariant: a ``ManagedProcess`` settles exactly once, and when it does nothing it started is still
running (unless the caller asked to ``keep_background``), every zombie of its tree is reaped, and
every fd it opened is closed. Settling never waits on a descendant that holds a pipe open: once
the root exits, the drain is bounded by ``drain_ms``, then leftovers get SIGTERM and, after
``leftover_grace_ms``, SIGKILL.

The child runs in its own session and process group (``setsid``: no controlling terminal), with
stdin ``/dev/null`` unless bytes were given (written, then closed, so ``cat`` sees EOF). Spawning
goes through ``subprocess.Popen`` without ``preexec_fn`` so CPython keeps its ``vfork`` fast path;
the cgroup move happens from the parent right after exec (see ``tree``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import errno
import fcntl
import itertools
import logging
import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.errors import TetherError
from tether.process.bounds import Bounds, Group, reached_lines
from tether.process.capture import CapturedStream
from tether.process.container import Container, ContainerError, container
from tether.process.tree import TREE_MARKER, ProcessTree, become_subreaper, cgroup_root

logger = logging.getLogger(__name__)
_READ_SIZE = 1 << 20
# What secrets.token_hex(4) returns, without importing secrets (hashlib, hmac and random with it:
# ~3 ms of `tether exec`'s start, which imports this module and nothing else that needs them).
_MARKER_PREFIX = os.urandom(4).hex()
_spawn_counter = itertools.count(1)
_F_SETPIPE_SZ = 1031
# Linux's MAX_ARG_STRLEN: one argument (or environment entry) holds 32 pages, its NUL included.
_MAX_ARG_BYTES = 131072
_DEFAULT_PIPE_SIZE = 65536
_STUCK_AFTER_KILL_S = 5.0
# A command still running after this long is moved into its own cgroup (see tree.enter_cgroup).
_CGROUP_AFTER_S = 0.02


class SpawnError(TetherError):
    """The operating system refused to start the process (``errno`` kept for callers)."""

    code = "SPAWN_FAILED"

    def __init__(self, message: str, *, errno_value: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_value


class ProcessState(enum.Enum):
    RUNNING = "running"
    EXITED = "exited"
    KILLED = "killed"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnRequest:
    """Everything needed to start and bound one process; ``env`` is the complete environment."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] | Mapping[bytes, bytes]
    # The program to run when already resolved (argv[0] then stays what the program sees as its
    # name); None = search PATH for argv[0].
    executable: str | None = None
    stdin: bytes | None = None
    stdout_max_bytes: int = 64_000
    stderr_max_bytes: int = 64_000
    max_spill_bytes: int = 0
    spill_dir: Path | None = None
    grace_ms: int = 3_000
    drain_ms: int = 150
    leftover_grace_ms: int = 200
    keep_background: bool = False
    # Descriptors the child inherits with the same numbers (the caller keeps and closes its copies).
    pass_fds: tuple[int, ...] = ()
    # Born in a group of its own that holds it to these (``tether.process.bounds``); None: unbounded.
    bounds: Bounds | None = None


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


class ManagedProcess:
    """A running command, its captured streams, and its tree; settle with ``await wait()``."""

    def __init__(
        self,
        request: SpawnRequest,
        popen: subprocess.Popen[bytes],
        tree: ProcessTree,
        stdout: CapturedStream,
        stderr: CapturedStream,
        fds: tuple[int, int, int | None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._request = request
        self._popen = popen
        self.tree = tree
        self.stdout = stdout
        self.stderr = stderr
        self._out_fd: int | None = fds[0]
        self._err_fd: int | None = fds[1]
        self._in_fd: int | None = fds[2]
        self._stdin_view = memoryview(request.stdin or b"")
        self._eof = asyncio.Event()
        self.settled = asyncio.Event()
        self.state = ProcessState.RUNNING
        self.returncode: int | None = None
        self.kill_requested = False
        self.detached = False
        self._escalation: asyncio.TimerHandle | None = None
        self._settle_task: asyncio.Task[None] | None = None
        self._pidfd: int | None = None
        self._on_settled: list[Callable[[], None]] = []
        self._cgroup_timer: asyncio.TimerHandle | None = None
        self._read_size: dict[int, int] = {}
        self.group: Group | None = None
        # What the command met at its bounds, read as it settles (before its group goes).
        self.bounds_reached: tuple[tuple[str, str], ...] = ()  # (processes | memory, sentence)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def exit_code(self) -> int | None:
        rc = self.returncode
        return rc if rc is not None and rc >= 0 else None

    @property
    def signal(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def suspended(self) -> bool:
        """Running, but every process of the tree is stopped (``kill -STOP $$``): it waits for ever."""
        return not self.settled.is_set() and not self.kill_requested and self.tree.suspended()

    # -- start ---------------------------------------------------------------------------------
    def _start(self) -> None:
        for fd, stream in ((self._out_fd, self.stdout), (self._err_fd, self.stderr)):
            assert fd is not None
            self._loop.add_reader(fd, self._on_readable, fd, stream)
        if self._in_fd is not None:
            self._pump_stdin()
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError:
            self._pidfd = None
        self._cgroup_timer = self._loop.call_later(_CGROUP_AFTER_S, self._enter_cgroup)
        if self._pidfd is not None:
            self._loop.add_reader(self._pidfd, self._on_exit_ready)
        else:  # no pidfd (old kernel): a thread blocks in waitpid for us.
            fut = self._loop.run_in_executor(None, self._popen.wait)
            fut.add_done_callback(lambda _f: self._on_root_exit())

    def _enter_cgroup(self) -> None:
        self._cgroup_timer = None
        if self.returncode is None:
            self.tree.enter_cgroup()

    def _pump_stdin(self) -> None:
        fd = self._in_fd
        if fd is None:
            return
        try:
            while self._stdin_view:
                written = os.write(fd, self._stdin_view)
                self._stdin_view = self._stdin_view[written:]
        except BlockingIOError:
            self._loop.add_writer(fd, self._on_stdin_writable)
            return
        except OSError:  # EPIPE: the child closed stdin or exited; it does not want the rest.
            pass
        self._close_stdin()

    def _on_stdin_writable(self) -> None:
        if self._in_fd is not None:
            self._loop.remove_writer(self._in_fd)
        self._pump_stdin()

    def _close_stdin(self) -> None:
        if self._in_fd is not None:
            self._loop.remove_writer(self._in_fd)
            os.close(self._in_fd)
            self._in_fd = None

    # -- output --------------------------------------------------------------------------------
    def _on_readable(self, fd: int, stream: CapturedStream) -> None:
        # A few reads per wake-up: enough to keep up with a fast writer, few enough not to starve
        # the loop.
        size = self._read_size.get(fd, _DEFAULT_PIPE_SIZE)
        for _ in range(8):
            try:
                chunk = os.read(fd, size)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._close_reader(fd)
                return
            stream.feed(chunk)
            if len(chunk) < size:
                return
            if size < _READ_SIZE:
                # The pipe was full: a bulk writer. A bigger pipe and bigger reads mean fewer
                # wake-ups per MiB; small commands keep small reads (a 1 MiB buffer per read of
                # a few bytes costs an allocation that shows in the per-command overhead).
                size = self._read_size[fd] = _READ_SIZE
                raise_pipe_size(fd)

    def _close_reader(self, fd: int) -> None:
        self._loop.remove_reader(fd)
        os.close(fd)
        if fd == self._out_fd:
            self._out_fd = None
            self.stdout.close()
        elif fd == self._err_fd:
            self._err_fd = None
            self.stderr.close()
        if self._out_fd is None and self._err_fd is None:
            self._eof.set()

    def _drain_now(self) -> None:
        for fd, stream in ((self._out_fd, self.stdout), (self._err_fd, self.stderr)):
            if fd is not None:
                self._on_readable(fd, stream)

    # -- exit and settle -----------------------------------------------------------------------
    def _on_exit_ready(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._popen.poll()
        self._on_root_exit()

    def _on_root_exit(self) -> None:
        self.returncode = self._popen.returncode
        if self._settle_task is not None or self.settled.is_set():
            return
        # Fast path (most commands): output already at EOF and nothing left behind — settle now,
        # without a task and another trip around the loop.
        self._drain_now()
        if self._eof.is_set() and not self.tree.members():
            self._finish()
            return
        self._settle_task = self._loop.create_task(self._settle())

    async def _settle(self) -> None:
        try:
            self._drain_now()
            if not self._eof.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._eof.wait(), self._request.drain_ms / 1000)
            if self.tree.members():
                if self._request.keep_background and not self.kill_requested:
                    self.detached = True
                else:
                    await self._end_leftovers()
            if not self.detached and not self._eof.is_set():
                # Every writer is dead now, so EOF is imminent; bound it anyway.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._eof.wait(), 0.1)
        finally:
            self._finish()

    async def _end_leftovers(self) -> None:
        grace = self._request.grace_ms / 1000
        if not self.kill_requested:
            self.tree.signal_all(signal.SIGTERM)
            grace = min(self._request.leftover_grace_ms, self._request.grace_ms) / 1000
            self._escalation = self._loop.call_later(grace, self._escalate)
        # A process stuck in uninterruptible sleep (D state) ignores even SIGKILL until its I/O
        # returns; past this bound we settle anyway rather than hang the caller.
        give_up = self._loop.time() + grace + _STUCK_AFTER_KILL_S
        pause = 0.001
        while self.tree.members() and self._loop.time() < give_up:
            await asyncio.sleep(pause)  # polling process death: pidfds per escapee buy little here
            pause = min(pause * 2, 0.02)

    def _escalate(self) -> None:
        self._escalation = None
        if not self.settled.is_set():
            self.tree.signal_all(signal.SIGKILL)

    def _finish(self) -> None:
        if self._cgroup_timer is not None:
            self._cgroup_timer.cancel()
            self._cgroup_timer = None
        if self._escalation is not None:
            self._escalation.cancel()
            self._escalation = None
        for fd in (self._out_fd, self._err_fd):
            if fd is not None:
                self._drain_now()
                if fd in (self._out_fd, self._err_fd):
                    self._close_reader(fd)
        self._close_stdin()
        self.tree.reap()
        self.tree.release(keep_running=self.detached)
        group = self.group
        if group is not None and group.bounds is not None:
            with contextlib.suppress(OSError):
                self.bounds_reached = tuple(reached_lines(group.reached(), group.bounds))
            if not self.detached:  # one left running keeps its bound; the next sweep removes it
                group.remove()
        self.state = ProcessState.KILLED if self.kill_requested else ProcessState.EXITED
        self.settled.set()
        callbacks, self._on_settled = self._on_settled, []
        for callback in callbacks:
            callback()

    def add_settled_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` right after the process settles (at once if it already has)."""
        if self.settled.is_set():
            callback()
        else:
            self._on_settled.append(callback)

    # -- control -------------------------------------------------------------------------------
    def kill(self, grace_ms: int | None = None) -> bool:
        """SIGTERM the whole tree now, SIGKILL after ``grace_ms``; idempotent, False once settled."""
        if self.settled.is_set():
            return False
        if self.kill_requested:
            return True
        self.kill_requested = True
        self.tree.signal_all(signal.SIGTERM)
        grace = self._request.grace_ms if grace_ms is None else grace_ms
        self._escalation = self._loop.call_later(max(0, grace) / 1000, self._escalate)
        return True

    async def wait(self) -> None:
        await self.settled.wait()


def _bytes_env(env: Mapping[str, str] | Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    if isinstance(next(iter(env), b""), bytes):  # built by build_child_env: all bytes
        return dict(env)  # type: ignore[arg-type]
    return {os.fsencode(k): os.fsencode(v) for k, v in env.items()}


def _pipe(opened: list[int]) -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    opened += (r, w)
    os.set_blocking(r, False)
    return r, w


def spawn(request: SpawnRequest) -> ManagedProcess:
    """Start ``request.argv``; raises ``SpawnError`` when the OS refuses. Needs a running loop."""
    become_subreaper()
    env = _bytes_env(request.env)
    cgroup_root()  # probe (and sweep stale trees) once, before the first spawn
    # Unique per spawn without a getrandom() call each time: a random per-process prefix + counter.
    marker = f"{_MARKER_PREFIX}{os.getpid()}-{next(_spawn_counter)}"
    env[TREE_MARKER.encode()] = marker.encode()
    spill_stem = marker
    streams = []
    for name, limit in (("stdout", request.stdout_max_bytes), ("stderr", request.stderr_max_bytes)):
        path = request.spill_dir / f"{spill_stem}.{name}" if request.spill_dir else None
        streams.append(
            CapturedStream(max_bytes=limit, max_spill_bytes=request.max_spill_bytes, spill_path=path)
        )
    opened: list[int] = []
    in_r: int | None = None
    in_w: int | None = None
    group: Group | None = None
    if request.bounds is not None:
        try:
            group = Group.create(request.bounds)
        except OSError as exc:
            raise SpawnError(_describe_group(exc, request), errno_value=exc.errno) from exc
    try:
        # A command asked to outlive us (``tether exec`` with background children) stays outside.
        box = None if request.keep_background else container()
        out_r, out_w = _pipe(opened)
        err_r, err_w = _pipe(opened)
        if request.stdin is not None:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(in_w, False)
    except OSError as exc:  # no descriptor or process left: close the pipes already made
        for made in opened:
            os.close(made)
        if group is not None:
            group.remove()
        raise SpawnError(_describe(exc, request), errno_value=exc.errno) from exc
    try:
        popen, box = _popen(request, env, box, stdin=in_r, stdout=out_w, stderr=err_w, group=group)
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w, in_r, in_w):
            if fd is not None:
                os.close(fd)
        if group is not None:
            group.remove()
        raise SpawnError(_describe(exc, request), errno_value=exc.errno) from exc
    for fd in (out_w, err_w, in_r):
        if fd is not None:
            os.close(fd)
    tree = ProcessTree.adopt(popen.pid, marker, box)
    process = ManagedProcess(request, popen, tree, streams[0], streams[1], (out_r, err_r, in_w))
    process.group = group
    process._start()
    return process


def _popen(
    request: SpawnRequest,
    env: dict[bytes, bytes],
    box: Container | None,
    *,
    stdin: int | None,
    stdout: int,
    stderr: int,
    group: Group | None = None,
) -> tuple[subprocess.Popen[bytes], Container | None]:
    """Start the process, inside ``box`` when given (falling back to outside if it cannot enter),
    born in ``group`` when given."""
    if group is None:
        return _popen_here(request, env, box, stdin=stdin, stdout=stdout, stderr=stderr)
    # The forking thread moves into the group and back (``Group.born_inside``): never the main
    # thread, whose memory group is where the memory controller charges the whole process.
    future = _bounded_spawner().submit(
        _popen_here, request, env, box, stdin=stdin, stdout=stdout, stderr=stderr, group=group
    )
    return future.result()


_spawner: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _bounded_spawner() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that forks bounded commands (made again in a forked child of this process)."""
    global _spawner
    if _spawner is None or _spawner[0] != os.getpid():
        _spawner = (
            os.getpid(),
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tether-bounded"),
        )
    return _spawner[1]


def _popen_here(
    request: SpawnRequest,
    env: dict[bytes, bytes],
    box: Container | None,
    *,
    stdin: int | None,
    stdout: int,
    stderr: int,
    group: Group | None = None,
) -> tuple[subprocess.Popen[bytes], Container | None]:
    def start() -> subprocess.Popen[bytes]:
        with group.born_inside() if group is not None else contextlib.nullcontext():
            return subprocess.Popen(
                list(request.argv),
                executable=request.executable,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=request.cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=request.pass_fds,
            )

    if box is None:
        return start(), None
    try:
        here = box.enter()
    except ContainerError as exc:
        # The kernel refused to switch this thread (not seen once the container started): run
        # the command outside, tracked as before, rather than fail it.
        logger.warning("spawning outside the command container: %s", exc)
        return start(), None
    try:
        return start(), box
    finally:
        box.leave(here)


def _describe_group(exc: OSError, request: SpawnRequest) -> str:
    what = request.argv[0] if request.argv else "(empty argv)"
    return (
        f"cannot start {what!r}: its group for the sandbox's bounds cannot be made ({exc}); the sandbox "
        "never runs a command without the bounds it reports. Check that /sys/fs/cgroup is writable, "
        "or set [sandbox].max_processes = 0 and memory_mb = 0 to turn the bounds off"
    )


def _describe(exc: OSError, request: SpawnRequest) -> str:
    what = request.argv[0] if request.argv else "(empty argv)"
    if exc.errno == errno.ENOENT and exc.filename == request.cwd:
        return f"working directory {request.cwd!r} does not exist"
    if exc.errno == errno.E2BIG:
        longest = max((len(os.fsencode(a)) for a in request.argv), default=0)
        if longest >= _MAX_ARG_BYTES:
            # ``bash -c COMMAND``: the command is the last argument.
            which = " (the command)" if len(os.fsencode(request.argv[-1])) == longest else ""
            return (
                f"cannot start {what!r}: an argument of it{which} is {longest} bytes, over the "
                f"{_MAX_ARG_BYTES - 1} one argument may hold ({exc.strerror}); write the text to a "
                "file and run the file"
            )
        return (
            f"cannot start {what!r}: its arguments and environment are over the system's limit "
            f"(getconf ARG_MAX) ({exc.strerror}); write the text to a file and run the file"
        )
    if exc.errno == errno.EMFILE:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return (
            f"cannot start {what!r}: {exc.strerror}: this process has used every file descriptor its "
            f"limit allows ({soft}, ulimit -n); end shells or background jobs no longer needed, or "
            "raise the limit, and call again"
        )
    if exc.errno == errno.EAGAIN:
        return (
            f"cannot start {what!r}: {exc.strerror}: no process can be started now (the user's "
            "process limit, ulimit -u, or the cgroup's pids.max is reached); end background jobs or "
            "shells no longer needed (job_list, job_kill), or raise the limit, and call again"
        )
    if exc.errno == errno.ENFILE:
        return (
            f"cannot start {what!r}: {exc.strerror}: the system has no file descriptor left "
            "(fs.file-max); end processes no longer needed, or raise the limit, and call again"
        )
    return f"cannot start {what!r}: {exc.strerror or exc}"


def raise_pipe_size(fd: int, size: int = _READ_SIZE) -> None:
    """Ask for a larger pipe buffer (fewer wake-ups for bulk output); harmless if refused."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
