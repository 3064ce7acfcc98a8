"""Which operations the sandbox denied, as structured entries, and the hint that would allow them.

Invariant: a denial is reported from what the *process* did, not from what it printed: the
command runs under ``strace -f --seccomp-bpf -e status=failed`` restricted to the syscalls that
can hit the sandbox (writes, connects, signals, namespaces, mounts), and each failed call is
classified against the policy — a write that failed with ``EROFS``/``EBUSY``, or with
``EACCES``/``EPERM`` on a path the policy does not let it write; a TCP/UDP connect or send that
failed while the network is off; a signal to a process outside the sandbox's PID namespace; an
``unshare``/``setns``/``mount``. A command that swallows its error output is still reported.

Why strace: it is one small Debian package, needs no privilege beyond tracing its own child, and
``--seccomp-bpf`` stops only on the traced syscalls, so a command that does not hit them runs at
close to full speed. bubblewrap's ``--json-status-fd`` reports only the exit status; fanotify
needs root and sees no connects. When strace is missing (or ``[sandbox].trace = false``) the
report degrades to parsing the standard errno messages on stderr (``Read-only file system``, …),
which catches what the command printed and nothing else.

A path is never resolved against this process's working directory: a relative one is joined to
the directory strace prints for the call's dirfd (``-y``: ``AT_FDCWD</dir>``), and where the call
has none (``mkdir``, ``creat``, …) it is reported as written, marked relative (``RELATIVE_DETAIL``).

``hint_for`` names the narrowest ``sandbox_permissions`` value that would allow everything that
was denied, and whether this deployment grants it without a person.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterable
from typing import Final

from tether.shell.sandbox.policy import SandboxPolicy, SandboxSettings
from tether.shell.types import ShellSandboxDenial

MAX_DENIALS: Final = 32

_LINE = re.compile(
    r"^(?:\[pid\s+)?(?P<pid>\d+)\]?\s+(?P<call>\w+)\((?P<args>.*)\)\s+=\s+-1\s+(?P<errno>E[A-Z0-9]+)"
)
_PATH_ARG = re.compile(r'(?:(?P<fd>AT_FDCWD|-?\d+)<(?P<dir>[^>]*)>,\s*)?"(?P<path>(?:[^"\\]|\\.)*)"')
_V4 = re.compile(r'sin_port=htons\((?P<port>\d+)\), sin_addr=inet_addr\("(?P<host>[^"]+)"\)')
_V6 = re.compile(r'sin6_port=htons\((?P<port>\d+)\).*?inet_pton\(AF_INET6, "(?P<host>[^"]+)"')
_FIRST_INT = re.compile(r"^\s*(-?\d+)")

_WRITE_CALLS: Final = frozenset(
    [
        "truncate",
        "mkdir",
        "mkdirat",
        "rmdir",
        "unlink",
        "unlinkat",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "symlink",
        "symlinkat",
        "chmod",
        "fchmodat",
        "chown",
        "lchown",
        "fchownat",
        "utimensat",
        "utimes",
        "mknod",
        "mknodat",
        "setxattr",
        "lsetxattr",
        "removexattr",
        "lremovexattr",
        "creat",
    ]
)
_OPEN_CALLS: Final = frozenset({"open", "openat", "openat2"})
_WRITE_FLAGS: Final = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
_NET_CALLS: Final = frozenset({"connect", "sendto", "sendmsg"})
# EINPROGRESS: a non-blocking connect's verdict arrives later through getsockopt, which strace
# prints only when it fails itself. With the network off it cannot reach the host, so it counts;
# the one false report is a command connecting to a server it started inside the sandbox.
_NET_ERRNOS: Final = frozenset(
    {
        "ENETUNREACH",
        "ECONNREFUSED",
        "EHOSTUNREACH",
        "EACCES",
        "EPERM",
        "ETIMEDOUT",
        "EADDRNOTAVAIL",
        "EINPROGRESS",
    }
)
_SIGNAL_CALLS: Final = frozenset({"kill", "tkill", "tgkill"})
_NAMESPACE_CALLS: Final = frozenset({"unshare", "setns"})
_MOUNT_CALLS: Final = frozenset({"mount", "umount2", "pivot_root", "chroot"})
_PRIVILEGE_ERRNOS: Final = frozenset({"EPERM", "EACCES", "EINVAL"})


def _unescape(text: str) -> str:
    try:
        raw = codecs.escape_decode(text.encode("latin-1", "backslashreplace"))[0]
    except (ValueError, UnicodeError):  # a line cut inside an escape (MAX_LINE_CHARS)
        return text
    return bytes(raw).decode("utf-8", "surrogateescape").replace("\0", "")


def _paths(args: str) -> list[str]:
    """The path arguments of one call, made absolute with the directory strace printed for dirfd
    (``-y``: ``AT_FDCWD</dir>`` names the caller's working directory at that call). A relative path
    of a call without a dirfd (``mkdir``, ``rmdir``, ``creat``, ``chmod``, …) stays relative: strace
    does not print the working directory, and the command may have changed it since it started."""
    paths: list[str] = []
    for match in _PATH_ARG.finditer(args):
        path = _unescape(match["path"])
        if not os.path.isabs(path) and match["dir"]:
            path = os.path.join(_unescape(match["dir"]), path)
        paths.append(os.path.normpath(path) if path else path)
    return paths


# The detail of a write denial whose path is relative to a directory the report does not know.
RELATIVE_DETAIL: Final = "relative to the directory the call ran in, which the trace does not show"


def is_relative(denial: ShellSandboxDenial) -> bool:
    """A write denial reported at a relative path (``RELATIVE_DETAIL``): where it was is unknown."""
    return denial.kind == "write" and not denial.target.startswith("/")


# /proc/PID/root, /proc/self/root … inside the sandbox lead to the sandbox's own root.
_PROC_ROOT = re.compile(r"^/proc/(?:\d+|self|thread-self)/root(?=/|$)")
# Paths whose meaning inside the sandbox differs from the host's: never resolved on the host.
_SANDBOX_PRIVATE: Final[tuple[str, ...]] = ("/proc", "/dev", "/tmp", "/run", "/sys")


def sandbox_path(path: str, policy: SandboxPolicy) -> tuple[str, str]:
    """(target, detail) of a path the command used, without ever raising: a write through a
    symlink is reported at the path it reached. The path is the command's choice, so it is
    resolved on the host only where the host's view is the sandbox's view (not under ``/proc``,
    ``/tmp``, ``/run``, ``/dev``, ``TETHER_HOME`` or a hidden path), and a resolution the host
    refuses (``readlink`` of another process's ``/proc/PID/root``, a loop) falls back to the path
    as written."""
    if not os.path.isabs(path):
        # Relative to the command's working directory at that call, which is not known here: never
        # resolved against this process's own working directory.
        return path, ""
    original = path
    match = _PROC_ROOT.match(path)
    if match is not None:
        path = "/" + path[match.end() :].lstrip("/")
    path = os.path.normpath(path) if path else "/"

    def under(roots: tuple[str, ...]) -> bool:
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    # A writable root under /tmp is the host's directory, bound over the sandbox's private /tmp.
    if under((policy.tether_home, *policy.hidden)) or (
        under(_SANDBOX_PRIVATE) and not under(policy.writable_roots)
    ):
        real = path
    else:
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError, RuntimeError):
            real = path
    return real, (f"through {original}" if real != original else "")


def _write_denial(call: str, args: str, errno_name: str, policy: SandboxPolicy) -> ShellSandboxDenial | None:
    if call in _OPEN_CALLS and not any(flag in args for flag in _WRITE_FLAGS):
        return None
    paths = _paths(args)
    if not paths:
        return None
    written = paths[-1] if call.startswith("symlink") else paths[0]
    if call.startswith(("rename", "link")) and len(paths) > 1:
        # Report whichever end the policy refuses (the source of a rename of a pinned directory).
        placed = [p for p in paths if os.path.isabs(p)]
        written = next((p for p in placed if not policy.writable(sandbox_path(p, policy)[0])), paths[0])
    if not os.path.isabs(written):
        # Only the read-only mounts' own errors are certainly the sandbox's: whether an EACCES was
        # inside a writable root cannot be told without the directory.
        if errno_name not in ("EROFS", "EBUSY"):
            return None
        return ShellSandboxDenial(kind="write", target=written, detail=f"{errno_name}: {RELATIVE_DETAIL}")
    target, via = sandbox_path(written, policy)
    if errno_name in ("EACCES", "EPERM") and policy.writable(target):
        return None  # an ordinary permission error inside the writable area, not the sandbox
    if errno_name not in ("EROFS", "EBUSY", "EACCES", "EPERM"):
        return None
    why = (
        "protected path"
        if (policy.is_protected(target) or _is_tether_home(target, policy))
        else ("outside the writable roots" if not policy.writable(target) else "mount point")
    )
    detail = f"{errno_name}: {why}" + (f" ({via})" if via else "")
    return ShellSandboxDenial(kind="write", target=target, detail=detail)


def _is_tether_home(path: str, policy: SandboxPolicy) -> bool:
    return path == policy.tether_home or path.startswith(policy.tether_home + "/")


def _network_denial(args: str, errno_name: str, policy: SandboxPolicy) -> ShellSandboxDenial | None:
    if policy.network or errno_name not in _NET_ERRNOS:
        return None
    v4, v6 = _V4.search(args), _V6.search(args)
    if v4 is not None:
        target = f"{v4['host']}:{v4['port']}"
    elif v6 is not None:
        target = f"[{v6['host']}]:{v6['port']}"
    else:
        return None  # AF_UNIX and friends: not network access
    return ShellSandboxDenial(kind="network", target=target, detail=f"{errno_name}: the network is off")


def _other_denial(call: str, args: str, errno_name: str) -> ShellSandboxDenial | None:
    if call in _SIGNAL_CALLS:
        first = _FIRST_INT.match(args)
        if first is None or int(first[1]) <= 0 or errno_name not in ("ESRCH", "EPERM"):
            return None
        if args.rstrip().endswith((", 0", ",0")):
            return None  # kill -0 is a probe, not an attempt
        if errno_name == "ESRCH" and not _host_process(int(first[1])):
            return None  # most likely a sandbox process that already exited (e.g. a trap's cleanup)
        detail = f"{errno_name}: processes outside the sandbox are not visible"
        return ShellSandboxDenial(kind="signal", target=f"pid {first[1]}", detail=detail)
    if errno_name not in _PRIVILEGE_ERRNOS:
        return None
    if call in _NAMESPACE_CALLS:
        return ShellSandboxDenial(kind="namespace", target=args.strip(), detail=f"{call}: {errno_name}")
    if call in _MOUNT_CALLS:
        paths = _paths(args)
        target = paths[1] if call == "mount" and len(paths) > 1 else (paths[0] if paths else args.strip())
        return ShellSandboxDenial(kind="mount", target=target, detail=f"{call}: {errno_name}")
    if call == "ptrace":
        return ShellSandboxDenial(kind="ptrace", target=args.strip(), detail=errno_name)
    return None


def _host_process(pid: int) -> bool:
    """A user-space process with this pid exists outside (kernel threads have no command line)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return bool(handle.read(1))
    except OSError:
        return False


def denials_from_trace(trace: str, policy: SandboxPolicy) -> tuple[ShellSandboxDenial, ...]:
    """Structured denials from strace output (one failed syscall per line)."""
    found: list[ShellSandboxDenial] = []
    for line in trace.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        call, args, errno_name = match["call"], match["args"], match["errno"]
        if call in _WRITE_CALLS or call in _OPEN_CALLS:
            denial = _write_denial(call, args, errno_name, policy)
        elif call in _NET_CALLS:
            denial = _network_denial(args, errno_name, policy)
        else:
            denial = _other_denial(call, args, errno_name)
        if denial is not None:
            found.append(denial)
    return _unique(found)


_STDERR_WRITE = re.compile(
    r"(?:'(?P<q>[^']+)'|(?P<p>/[^\s:']+|[\w.\-][^\s:']*)): (?:Read-only file system|Device or resource busy)"
)
_STDERR_PY = re.compile(r"\[Errno (?:30|16)\] [^:]+: '(?P<p>[^']+)'")
_STDERR_TCP = re.compile(
    r"/dev/(?:tcp|udp)/(?P<host>[^/\s:]+)/(?P<port>\d+): (?:Network is unreachable|Connection refused)"
)
_STDERR_NET = re.compile(r"Network is unreachable|Temporary failure in name resolution")
_STDERR_NS = re.compile(r"unshare failed: Operation not permitted|mount: .*permission denied")


def denials_from_stderr(stderr: str, policy: SandboxPolicy, cwd: str) -> tuple[ShellSandboxDenial, ...]:
    """The degraded report: the standard errno messages a command printed (no strace)."""
    found: list[ShellSandboxDenial] = []
    for match in [*_STDERR_WRITE.finditer(stderr), *_STDERR_PY.finditer(stderr)]:
        raw = match.groupdict().get("q") or match.group("p")
        target, via = sandbox_path(os.path.join(cwd, raw), policy)
        found.append(ShellSandboxDenial(kind="write", target=target, detail=f"from stderr {via}".strip()))
    if not policy.network:
        for match in _STDERR_TCP.finditer(stderr):
            target = f"{match['host']}:{match['port']}"
            found.append(ShellSandboxDenial(kind="network", target=target, detail="from stderr"))
        if not any(d.kind == "network" for d in found) and _STDERR_NET.search(stderr):
            found.append(ShellSandboxDenial(kind="network", target="(unknown host)", detail="from stderr"))
    if _STDERR_NS.search(stderr):
        found.append(ShellSandboxDenial(kind="namespace", target="(unknown)", detail="from stderr"))
    return _unique(found)


# What programs print when the system-call filter refused them (the tracer never sees those calls).
_FILTER_MESSAGES: Final = (
    # tmux -S PATH …, and clients that word it the same way
    (re.compile(r"error connecting to (?P<target>\S+) \(Operation not permitted\)"), "socket"),
    # ssh-add, ssh with an agent
    (re.compile(r"Error connecting to agent: Operation not permitted"), "socket"),
    # Python's socket.socket(AF_UNIX …): the traceback names socket.py's constructor
    (
        re.compile(r'socket\.py", line \d+, in __init__\n[^\n]*\n(?:[^\n]*\n)?PermissionError: \[Errno 1\]'),
        "socket",
    ),
    # socat, and C programs that print perror("socket")
    (re.compile(r"socket(?:\(1, \d+, \d+\))?: Operation not permitted"), "socket"),
    (re.compile(r"io_uring_(?:setup|queue_init)[^\n]*(?:Operation not permitted|-1)"), "io_uring"),
    (re.compile(r"keyctl[^\n]*Operation not permitted"), "keyring"),
)
_FILTER_DETAIL: Final = {
    "socket": "Unix (and other non-network) sockets cannot be created: no host socket is reachable",
    "io_uring": "io_uring is refused in the sandbox",
    "keyring": "the kernel keyrings are shared with the host and refused in the sandbox",
}


def denials_from_filter(stderr: str) -> tuple[ShellSandboxDenial, ...]:
    """Refusals of the system-call filter, recognised from the messages programs print."""
    found: list[ShellSandboxDenial] = []
    for pattern, kind in _FILTER_MESSAGES:
        for match in pattern.finditer(stderr):
            target = match.groupdict().get("target") or {"socket": "AF_UNIX"}.get(kind, kind)
            found.append(ShellSandboxDenial(kind=kind, target=target, detail=_FILTER_DETAIL[kind]))
    return _unique(found)


def _unique(denials: Iterable[ShellSandboxDenial]) -> tuple[ShellSandboxDenial, ...]:
    seen: dict[tuple[str, str], ShellSandboxDenial] = {}
    for denial in denials:
        seen.setdefault((denial.kind, denial.target), denial)
    return tuple(seen.values())[:MAX_DENIALS]


def needed_mode(denials: Iterable[ShellSandboxDenial], policy: SandboxPolicy) -> str | None:
    """The narrowest mode that would have allowed every denial whose target is known (a write at a
    relative path is left out: what would allow it depends on where it was); ``None`` when no
    denial's target is known."""
    modes: set[str] = set()
    for denial in denials:
        if is_relative(denial):
            continue
        if denial.kind == "network":
            modes.add("allow_network")
        elif denial.kind == "write" and not (
            policy.is_protected(denial.target)
            or _is_tether_home(denial.target, policy)
            or denial.target.startswith(("/proc/", "/sys/", "/dev/"))  # the sandbox's own in every mode
            or "mount point" in denial.detail
            or denial.detail.startswith("the link to")  # a symlinked persistence path, put back
        ):
            modes.add("allow_host_write")
        else:
            modes.add("require_escalated")
    if not modes:
        return None
    return modes.pop() if len(modes) == 1 else "require_escalated"


def hint_for(
    denials: tuple[ShellSandboxDenial, ...],
    policy: SandboxPolicy,
    settings: SandboxSettings,
    *,
    again: str = "call again with",
) -> str | None:
    """``again`` says how to ask: a one-shot command is called again, a persistent shell is
    reopened (its sandbox was fixed when it started)."""
    if not denials:
        return None
    mode = needed_mode(denials, policy)
    unplaced = (
        "; a path written relative to an unknown directory cannot be judged (use an absolute path to "
        "learn which mode would allow it)"
        if any(is_relative(d) for d in denials)
        else ""
    )
    if mode is None:
        return f"policy {policy.summary()}{unplaced}"
    granted = (
        "this deployment grants it without approval"
        if mode in settings.allow_escalations
        else "this deployment refuses it without a person's approval ([sandbox].allow_escalations)"
    )
    hint = (
        f"policy {policy.summary()}; to allow this, {again} "
        f'sandbox_permissions="{mode}" and a justification ({granted}){unplaced}'
    )
    if any(d.kind == "socket" for d in denials):
        hint += "; Unix sockets are refused in every confined mode unless [sandbox].allow_unix_sockets"
    if any(d.kind == "git" for d in denials):
        hint += "; hooks and git settings made in the sandbox were disabled (unconfined git never runs them)"
    return hint
