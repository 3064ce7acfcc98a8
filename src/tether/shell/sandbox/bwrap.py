"""Turning a ``SandboxPolicy`` into one bubblewrap argv, and the host-side state one run needs.

Invariant: bubblewrap applies mounts in argument order, and this module emits them so that every
later mount can only *narrow* an earlier one — root (read-only, or writable for
``allow_host_write``), then fresh ``/dev`` (read-only but for its own ``/dev/shm``) and ``/proc``
with every kernel interface in it bound read-only, private ``/tmp`` and ``/run``, then the
writable roots, then self-binds of the directories that must not be renamed away (git
directories, and those between a writable root and a protected path), then the protected paths
read-only, then ``TETHER_HOME`` and hidden paths masked. Nothing the command can do inside the
sandbox undoes a mount: it runs with every capability dropped, no new privileges, the system-call
filter of ``sandbox.seccomp``, in its own PID/IPC/UTS (and, without ``allow_network``, network)
namespace.

Root inside is still uid 0 outside (no user namespace: files it writes in the roots keep their
owner), and the kernel lets global uid 0 write sysctls without any capability — so ``/proc/sys``
and the other writable kernel interfaces of ``/proc`` (``sysrq-trigger``, ``mtrr``, ``irq``,
``bus``, ``pressure``, …) are bound read-only over the fresh ``/proc``, and ``/sys`` stays a
read-only mount. Remounting them needs ``CAP_SYS_ADMIN``, which nothing inside has; a nested user
namespace does not help either, since the kernel locks the flags of mounts it inherits.

Why writable binds go through file descriptors (``--bind-fd``): ``mount(2)`` follows symlinks,
and a concurrent confined command can swap any unprotected directory under a writable root for a
symlink between the time the argv is built and bubblewrap's mount. Each writable source is opened
here one component at a time with ``O_NOFOLLOW``, so what is mounted writable is always the
directory at that path, never something a symlink points to.

Why the self-binds: Linux refuses to rename or remove a mount point (``EBUSY``), but it does rename
the *parent* of one. Without them ``mv .git .g && mkdir -p .git/hooks`` would build a fresh,
writable ``hooks`` beside the protected one; with them every directory on the way is a mount point.

A protected path that does not exist yet still has to be protected (``echo … > ~/.bashrc`` must not
create it). bubblewrap can only mount over something that exists, so the run binds an empty
read-only placeholder there (``sandbox.placeholders``: listed in a ledger before it exists, removed
when no live sandbox lists it, swept after a crash; a persistent shell's are listed in the
shell's own ledger for its whole life). Inside git directories, absent control files are not given
placeholders: ``sandbox.git`` neutralises whatever appears there instead.

The trace directory (under ``TETHER_HOME``) is bound read-only at ``TRACE_MOUNT``: the tracer
inside still opens its FIFO for writing (a read-only mount refuses writes to regular files and
directories only), but a command cannot store anything there.

Every tmpfs the command may write (``/tmp``, ``/dev/shm``, ``/run``) is sized
(``[sandbox].tmpfs_size_mb``): tmpfs pages are memory that no process owns, so an unsized one let a
command pin half the machine's RAM per mount for as long as its sandbox lived.

Reading is not narrowed: the whole filesystem stays readable except ``TETHER_HOME`` and the
configured ``hidden_paths``. Unix sockets cannot be created at all (``sandbox.seccomp``), which is
what keeps the host's sockets out of reach; ``/run`` and ``TETHER_HOME`` are masked as well.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether import ondisk
from tether.errors import TetherError
from tether.process.tree import alive
from tether.shell.sandbox import launch, placeholders
from tether.shell.sandbox.launch import FilterProgram, OpenDir, PlanItem, materialise
from tether.shell.sandbox.policy import SandboxPolicy
from tether.shell.sandbox.repos import RepoSnapshot
from tether.shell.sandbox.seccomp import build_filter
from tether.shell.sandbox.trace import TraceReader

TRACE_MOUNT: Final = "/run/tether-sandbox"
TRACE_FILE: Final = "trace"
# Syscalls whose failure can be a sandbox denial: writes, connects, signals, namespaces, mounts.
TRACED_CALLS: Final = (
    "open,openat,openat2,creat,truncate,mkdir,mkdirat,rmdir,unlink,unlinkat,rename,renameat,renameat2,"
    "link,linkat,symlink,symlinkat,chmod,fchmodat,chown,lchown,fchownat,utimensat,utimes,mknod,mknodat,"
    "setxattr,lsetxattr,removexattr,lremovexattr,connect,sendto,sendmsg,kill,tkill,tgkill,ptrace,"
    "unshare,setns,mount,umount2,pivot_root,chroot"
)
# Directories of /proc whose files (or whose subdirectories' files) a root process may write.
_PROC_INTERFACE_DIRS: Final = frozenset(
    {
        "sys",
        "irq",
        "bus",
        "fs",
        "pressure",
        "acpi",
        "driver",
        "tty",
        "sysvipc",
        "scsi",
        "asound",
        "dynamic_debug",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtraBind:
    """A caller-named bind mount (e.g. a persistent shell's own directory): read-only unless
    ``writable``."""

    source: str
    dest: str
    writable: bool = False


@functools.lru_cache(maxsize=1)
def proc_kernel_interfaces() -> tuple[str, ...]:
    """Top-level entries of ``/proc`` that are kernel interfaces rather than processes, and that
    root could write: bound read-only over the sandbox's fresh ``/proc`` (one mount each, so an
    interface directory without a single writable file is left alone)."""
    found: list[str] = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() or entry.is_symlink():
                continue  # processes; self, thread-self, mounts, net (links into a process)
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            writable_file = stat.S_ISREG(mode) and bool(mode & 0o222)
            interface_dir = stat.S_ISDIR(mode) and entry.name in _PROC_INTERFACE_DIRS
            if writable_file or (interface_dir and (entry.name == "sys" or _holds_writable_file(entry.path))):
                found.append(entry.path)
    return tuple(sorted(found))


def _holds_writable_file(directory: str) -> bool:
    for parent, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                mode = os.lstat(os.path.join(parent, name)).st_mode
                if stat.S_ISREG(mode) and mode & 0o222:
                    return True
    return False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _between(root: str, path: str) -> list[str]:
    """Directories strictly between ``root`` and ``path`` (outermost first)."""
    parents: list[str] = []
    current = os.path.dirname(path)
    while current != root and _under(current, root) and current not in ("/", ""):
        parents.append(current)
        current = os.path.dirname(current)
    return parents[::-1]


class SandboxRun:
    """The host-side state of one confined command (or long-lived shell): trace directory,
    placeholders, and the file descriptors bubblewrap inherits.

    ``pass_fds`` must reach bubblewrap (same numbers); ``cleanup()`` is idempotent and runs once
    the process settled (the executor's settle callback does it, also when the spawn failed).
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        trace: bool,
        repos: RepoSnapshot | None = None,
        extra_binds: Sequence[ExtraBind] = (),
        seccomp: bytes | None = None,
        trace_dir: str | None = None,
        shell_placeholders: placeholders.ShellPlaceholders | None = None,
    ) -> None:
        """``trace=True``: a FIFO this process reads (``trace_text``). ``trace_dir``: a directory
        holding the FIFO ``TRACE_FILE`` that someone else reads (a persistent shell's collector).
        ``shell_placeholders``: the stand-ins belong to a persistent shell's ledger, not to this
        process (``cleanup`` then leaves them)."""
        self.policy = policy
        self.repos = repos or RepoSnapshot(gitdirs={}, pointers=())
        self.extra_binds = tuple(extra_binds)
        self.trace_dir: str | None = trace_dir
        self._shell_placeholders = shell_placeholders
        self._trace: TraceReader | None = None
        self._held: list[list[str]] = []
        # The mounts that sit on a host path the host may replace, as ``sandbox.keeper`` restores
        # them: (path, "bind" | "ro" | "tmpfs" | "null"), filled by ``mounts``.
        self.kept: list[tuple[str, str]] = []
        self._fds: list[int] = []
        self._closed = False
        self._seccomp = (
            seccomp if seccomp is not None else build_filter(allow_unix_sockets=policy.unix_sockets)
        )
        if trace:
            # The FIFO's directory lives under TETHER_HOME, hidden from the command except through
            # its own bind at TRACE_MOUNT.
            state = os.path.join(policy.tether_home, "sandbox")
            os.makedirs(state, mode=0o700, exist_ok=True)
            self.trace_dir = tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=state)
            self._trace = TraceReader(os.path.join(self.trace_dir, TRACE_FILE))

    @property
    def traced(self) -> bool:
        return self._trace is not None

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(self._fds)

    def trace_text(self) -> str:
        """The tracer's relevant lines (call once the process settled)."""
        return "" if self._trace is None else self._trace.finish()

    def inside_writable_root(self, path: str) -> bool:
        return self._writable_root_of(path) is not None

    def _writable_root_of(self, path: str) -> str | None:
        if self.policy.host_write:
            return "/"
        matches = [root for root in self.policy.writable_roots if _under(path, root)]
        return max(matches, key=len) if matches else None

    def _bind_fd(self, path: str) -> list[PlanItem]:
        return ["--bind-fd", OpenDir(path), path]

    def _kernel_mounts(self) -> list[str]:
        # bubblewrap's /dev is a writable tmpfs without a size: its own /dev/shm, sized, is the one
        # place there a command may write (POSIX semaphores and shared memory), the rest read-only.
        args = ["--dev", "/dev", *self._tmpfs("/dev/shm"), "--remount-ro", "/dev", "--proc", "/proc"]
        for interface in proc_kernel_interfaces():
            args += ["--ro-bind", interface, interface]
        if self.policy.host_write and os.path.isdir("/sys"):
            # Kernel state, not files: root-owned sysfs attributes need no capability to write.
            args += ["--ro-bind", "/sys", "/sys"]
        return args

    def _tmpfs(self, path: str) -> list[str]:
        """A private tmpfs at ``path`` that holds at most ``policy.tmpfs_bytes``: its pages belong to
        no process, so the OOM killer could not take back what a command stored there."""
        return ["--size", str(self.policy.tmpfs_bytes), "--tmpfs", path]

    def _placeholders(self, guarded: list[str]) -> None:
        for path in guarded:
            kind = "dir" if path in self.policy.protected_dirs else "file"
            if not self.policy.may_stand_in(path):
                continue
            if os.path.lexists(path) and not placeholders.is_placeholder(path):
                continue  # the real thing: bound read-only as it is
            if self._shell_placeholders is not None:
                self._shell_placeholders.hold(path, kind=kind)
                continue
            held = placeholders.acquire(path, kind=kind, home=self.policy.tether_home)
            if held is not None:
                self._held.append(held)

    def mounts(self) -> list[PlanItem]:
        """The bubblewrap mount arguments, in the order that makes each one narrow the last."""
        policy = self.policy
        self.kept = []
        args: list[PlanItem] = ["--bind" if policy.host_write else "--ro-bind", "/", "/"]
        args += self._kernel_mounts()
        if not policy.host_write:
            args += self._tmpfs("/tmp")
        args += self._tmpfs("/run")
        if policy.network:
            resolv = os.path.realpath("/etc/resolv.conf")
            if _under(resolv, "/run") and os.path.exists(resolv):
                args += ["--ro-bind", resolv, resolv]  # DNS through a resolver stub living in /run
        if not policy.host_write:
            for root in policy.writable_roots:
                args += self._bind_fd(root)
        guarded = [p for p in policy.protected if self._writable_root_of(p) is not None]
        self._placeholders(guarded)
        # The roots' own git directories cannot be renamed away; nested ones would cost a mount each
        # (bubblewrap spends ~0.5 ms per mount), and one the command replaces is a new git
        # directory, which sandbox.git neutralises afterwards.
        gitdirs = [
            g for g in self.repos.gitdirs if os.path.dirname(g) in policy.writable_roots and os.path.isdir(g)
        ]
        masked = [policy.tether_home, *policy.hidden]
        if self._writable_root_of(policy.tether_home) is not None:
            # An absent TETHER_HOME in a writable area would be created by the command; own it first.
            os.makedirs(policy.tether_home, mode=0o700, exist_ok=True)
        pinned: list[str] = []
        for path in [*guarded, *masked]:
            writable_root = self._writable_root_of(path)
            if writable_root is not None:
                pinned += [p for p in _between(writable_root, path) if os.path.isdir(p)]
        # Sorted: a directory before anything below it (each bind carries the mounts under it).
        for parent in sorted({*pinned, *gitdirs} - set(policy.writable_roots)):
            args += self._bind_fd(parent)
            self.kept.append((parent, "bind"))
        for path in guarded:
            if os.path.lexists(path):
                args += ["--ro-bind", path, path]
                self.kept.append((path, "ro"))
        for path in masked:
            if os.path.isdir(path):
                args += ["--tmpfs", path, "--remount-ro", path]
                self.kept.append((path, "tmpfs"))
            elif os.path.lexists(path):
                args += ["--ro-bind", "/dev/null", path]
                self.kept.append((path, "null"))
            else:
                # Nothing to mount over yet: a persistent shell's keeper hides it when it appears.
                self.kept.append((path, "hide"))
        # The caller's explicit grants come last: one may name a directory inside TETHER_HOME.
        for bind in self.extra_binds:
            args += ["--bind-fd", OpenDir(bind.source)] if bind.writable else ["--ro-bind", bind.source]
            args.append(bind.dest)
        if self.trace_dir is not None:
            # Read-only: the tracer still writes its FIFO (a read-only mount refuses only regular
            # files and directories), but the command cannot store anything in TETHER_HOME.
            args += ["--ro-bind", self.trace_dir, TRACE_MOUNT]
        return args

    def argv(self, bwrap: str, strace: str | None, command_argv: Sequence[str]) -> tuple[str, ...]:
        """The whole bubblewrap command line, its descriptors opened (``pass_fds``)."""
        argv, fds = materialise(self.plan(bwrap, strace, command_argv))
        self._fds.extend(fds)
        return argv

    def plan(
        self, bwrap: str, strace: str | None, command_argv: Sequence[str], *, session: bool = True
    ) -> list[PlanItem]:
        """The bubblewrap command line with descriptors still to open; ``session=False`` keeps the
        caller's terminal as the controlling one (an interactive shell in a tmux pane needs job
        control; the system-call filter refuses ``TIOCSTI`` instead of ``--new-session``)."""
        policy = self.policy
        namespaces = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not policy.network:
            namespaces.append("--unshare-net")
        inner: list[str] = list(command_argv)
        if strace is not None and self.trace_dir is not None:
            # -D: the tracer runs as a detached grandchild, so the shell stays bubblewrap's main child
            # and the sandbox ends when the shell does — plain strace -f would wait for every
            # background descendant. strace prints each failed call before resuming the tracee, so
            # nothing is lost when the PID namespace's teardown kills the tracer.
            inner = [
                strace, "-D", "-f", "-qq", "-y", "--seccomp-bpf", "-e", "signal=none", "-e", "status=failed",
                "-e", f"trace={TRACED_CALLS}", "-o", f"{TRACE_MOUNT}/{TRACE_FILE}", "--", *inner,
            ]  # fmt: skip
        return [
            bwrap,
            *self.mounts(),
            *namespaces,
            "--die-with-parent",
            *(["--new-session"] if session else []),
            "--cap-drop",
            "ALL",
            "--seccomp",
            FilterProgram(self._seccomp),
            "--chdir",
            policy.cwd,
            "--",
            *inner,
        ]

    def cleanup(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        if self._trace is not None:
            self._trace.close()
            if self.trace_dir is not None:
                shutil.rmtree(self.trace_dir, ignore_errors=True)
        for held in reversed(self._held):
            placeholders.release(held)
        self._held.clear()


def sweep_stale_traces(home: str) -> int:
    """Remove trace directories of tether processes that died before their commands settled."""
    swept = 0
    state = Path(home) / "sandbox"
    for run_dir in state.glob("run-*-*") if state.is_dir() else ():
        pid_text = run_dir.name.split("-")[1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not alive(int(pid_text)):
            shutil.rmtree(run_dir, ignore_errors=True)
            swept += 1
    return swept


def check_launcher() -> None:
    """Refuse what would run the launcher (a confined shell's pane, a command's keeper) once its
    files changed under this server (``launch.replaced``): the later build's launcher, given this
    server's plan, fails in the pane, and the shell would seem to end by itself."""
    if launch.replaced():
        raise TetherError(
            ondisk.upgraded(
                os.path.dirname(os.path.abspath(launch.__file__)),
                "A confined shell, and a confined command's keeper, run the sandbox's launcher from "
                "those files, which are another version than this server's",
            ),
            code="UNAVAILABLE",
        )
