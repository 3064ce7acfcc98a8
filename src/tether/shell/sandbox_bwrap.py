"""Turning a ``SandboxPolicy`` into one bubblewrap argv, and the host-side state one run needs.

Invariant: bubblewrap applies mounts in argument order, and this module emits them so that every
later mount can only *narrow* an earlier one — root (read-only, or writable for
``allow_host_write``), then fresh ``/dev`` ``/proc`` and private ``/tmp`` ``/run``, then the
writable roots, then self-binds of the directories between a writable root and a protected path,
then the protected paths read-only, then ``TETHER_HOME`` and hidden paths masked. Nothing the
command can do inside the sandbox undoes a mount: it runs with every capability dropped, no new
privileges, in its own PID/IPC/UTS (and, without ``allow_network``, network) namespace.

Why the self-binds: Linux refuses to rename or remove a mount point (``EBUSY``), but it does rename
the *parent* of one. Without them ``mv .git .g && mkdir -p .git/hooks`` would build a fresh,
writable ``hooks`` beside the protected one; with them every directory on the way is a mount point.

A protected path that does not exist yet still has to be protected (``echo … > ~/.bashrc`` must not
create it). bubblewrap can only mount over something that exists, so the run binds an empty
read-only placeholder there (``sandbox_placeholders``: shared, counted, removed when the last user
ends, swept after a crash). Two tether *processes* racing on the same absent path can still remove
one another's placeholder early (documented limit).

Reading is not narrowed: the whole filesystem stays readable except ``TETHER_HOME`` and the
configured ``hidden_paths``. Unix sockets on a read-only mount can still be connected to (the
kernel treats ``connect`` as no write), which is why ``/run`` and ``TETHER_HOME`` are masked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tether.shell import sandbox_placeholders as placeholders
from tether.shell.sandbox_policy import SandboxPolicy
from tether.shell.sandbox_trace import TraceReader

TRACE_MOUNT: Final = "/run/tether-sandbox"
TRACE_FILE: Final = "trace"
# Syscalls whose failure can be a sandbox denial: writes, connects, signals, namespaces, mounts.
TRACED_CALLS: Final = (
    "open,openat,openat2,creat,truncate,mkdir,mkdirat,rmdir,unlink,unlinkat,rename,renameat,renameat2,"
    "link,linkat,symlink,symlinkat,chmod,fchmodat,chown,lchown,fchownat,utimensat,utimes,mknod,mknodat,"
    "setxattr,lsetxattr,removexattr,lremovexattr,connect,sendto,sendmsg,kill,tkill,tgkill,ptrace,"
    "unshare,setns,mount,umount2,pivot_root,chroot"
)


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
    """The host-side state of one confined command: trace directory and placeholders.

    ``cleanup()`` is idempotent and must run once the process settled (the executor's settle
    callback does it, also when the spawn failed).
    """

    def __init__(self, policy: SandboxPolicy, *, trace: bool) -> None:
        self.policy = policy
        self.trace_dir: str | None = None
        self._trace: TraceReader | None = None
        self._placeholders: list[str] = []
        self._closed = False
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

    def trace_text(self) -> str:
        """The tracer's relevant lines (call once the process settled)."""
        return "" if self._trace is None else self._trace.finish()

    def _writable_root_of(self, path: str) -> str | None:
        if self.policy.host_write:
            return "/"
        matches = [root for root in self.policy.writable_roots if _under(path, root)]
        return max(matches, key=len) if matches else None

    def mounts(self) -> list[str]:
        """The bubblewrap mount arguments, in the order that makes each one narrow the last."""
        policy = self.policy
        args = ["--bind" if policy.host_write else "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if policy.host_write and os.path.isdir("/sys"):
            # Kernel state, not files: root-owned sysfs attributes need no capability to write.
            args += ["--ro-bind", "/sys", "/sys"]
        if not policy.host_write:
            args += ["--tmpfs", "/tmp"]
        args += ["--tmpfs", "/run"]
        if policy.network:
            resolv = os.path.realpath("/etc/resolv.conf")
            if _under(resolv, "/run") and os.path.exists(resolv):
                args += ["--ro-bind", resolv, resolv]  # DNS through a resolver stub living in /run
        if not policy.host_write:
            for root in policy.writable_roots:
                args += ["--bind", root, root]
        guarded = [p for p in policy.protected if self._writable_root_of(p) is not None]
        masked = [policy.tether_home, *policy.hidden]
        if self._writable_root_of(policy.tether_home) is not None:
            # An absent TETHER_HOME in a writable area would be created by the command; own it first.
            os.makedirs(policy.tether_home, mode=0o700, exist_ok=True)
        pinned: list[str] = []
        for path in [*guarded, *masked]:
            writable_root = self._writable_root_of(path)
            if writable_root is None:
                continue
            for parent in _between(writable_root, path):
                if parent not in pinned and os.path.isdir(parent):
                    pinned.append(parent)
        for parent in pinned:
            args += ["--bind", parent, parent]
        for path in guarded:
            if os.path.lexists(path):
                args += ["--ro-bind", path, path]
            elif placeholders.acquire(path, home=policy.tether_home):
                self._placeholders.append(path)
                args += ["--ro-bind", path, path]
        for path in masked:
            if os.path.isdir(path):
                args += ["--tmpfs", path, "--remount-ro", path]
            elif os.path.lexists(path):
                args += ["--ro-bind", "/dev/null", path]
        if self.trace_dir is not None:
            args += ["--bind", self.trace_dir, TRACE_MOUNT]
        return args

    def argv(self, bwrap: str, strace: str | None, command_argv: Sequence[str]) -> tuple[str, ...]:
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
        return (
            bwrap,
            *self.mounts(),
            *namespaces,
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--chdir",
            policy.cwd,
            "--",
            *inner,
        )

    def cleanup(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._trace is not None:
            self._trace.close()
        if self.trace_dir is not None:
            shutil.rmtree(self.trace_dir, ignore_errors=True)
        for path in self._placeholders:
            placeholders.release(path)
        self._placeholders.clear()


def sweep_stale_traces(home: str) -> int:
    """Remove trace directories of tether processes that died before their commands settled."""
    swept = 0
    state = Path(home) / "sandbox"
    for run_dir in state.glob("run-*-*") if state.is_dir() else ():
        pid_text = run_dir.name.split("-")[1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not placeholders.alive(int(pid_text)):
            shutil.rmtree(run_dir, ignore_errors=True)
            swept += 1
    return swept
