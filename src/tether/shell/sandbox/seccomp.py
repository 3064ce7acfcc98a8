"""The sandbox's system-call filter: one classic-BPF program handed to bubblewrap (``--seccomp FD``).

Invariant: inside the sandbox no process can create a socket that reaches outside it except
through the network the policy allows, reach the host's kernel keyrings, inject input into a
terminal, or run io_uring. Concretely the filter refuses, with ``EPERM``:

- ``socket()`` of any address family but ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` — ``AF_UNIX``
  above all: a path socket anywhere on the host (another tmux server, an ssh or gpg agent, Docker)
  and an abstract socket of the host are reachable through nothing else, and a read-only mount
  does not stop ``connect``. ``AF_VSOCK`` would reach the hypervisor host, which no network
  namespace covers. ``[sandbox].allow_unix_sockets`` lets ``AF_UNIX`` through (a deployment grant);
- ``socketpair()`` except ``AF_UNIX`` stream and seqpacket pairs (a datagram socket can ``sendto``
  any host datagram socket by path; a connected stream pair can reach nothing);
- ``io_uring_setup`` / ``_enter`` / ``_register``: io_uring opens sockets and files without
  passing through this filter (or the tracer);
- ``keyctl``, ``add_key``, ``request_key``: root's user keyring is shared with every root process
  on the host;
- ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)``: typing into the terminal a long-lived shell shares
  with its tmux pane (the kernel compares only the low 32 bits of the request, and so does this).

A system call of a foreign ABI (x32, or an architecture this module has no table for) kills the
process: its numbers would mean something else. 32-bit compat processes get the same rules from
their own table (``socketcall``, which hides its arguments in memory, is refused).

Why this is not reported by the tracer: a filter verdict of ``ERRNO`` takes precedence over strace's
``TRACE``, so the tracer never sees a refused call; the denial reporter recognises the messages
programs print instead (``sandbox.denials``). That is also why glibc's silent probe of the nscd
socket on every ``getpwnam`` does not flood results with reports.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from dataclasses import dataclass
from typing import Final

from tether.errors import UsageError

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR, _ARCH = 0, 4
_ARG0, _ARG1 = 16, 24  # the low 32 bits of args[0] / args[1] on a little-endian machine

_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_JGE_K: Final = 0x35
_AND_K: Final = 0x54
_RET_K: Final = 0x06

_ALLOW: Final = 0x7FFF0000
_KILL_PROCESS: Final = 0x80000000
_ERRNO: Final = 0x00050000

AF_UNIX: Final = 1
AF_INET: Final = 2
AF_INET6: Final = 10
AF_NETLINK: Final = 16
SOCK_DGRAM: Final = 2
SOCK_TYPE_MASK: Final = 0xF
TIOCSTI: Final = 0x5412
TIOCLINUX: Final = 0x541C
X32_SYSCALL_BIT: Final = 0x40000000


@dataclass(frozen=True, slots=True, kw_only=True)
class SyscallTable:
    """The numbers this filter needs for one ABI (``arch`` as in ``<linux/audit.h>``)."""

    arch: int
    socket: int
    socketpair: int
    ioctl: int
    refused: tuple[int, ...]  # io_uring_*, keyctl, add_key, request_key (+ socketcall)
    x32: bool = False  # numbers with X32_SYSCALL_BIT set belong to another ABI


_IO_URING: Final = (425, 426, 427)
X86_64: Final = SyscallTable(
    arch=0xC000003E, socket=41, socketpair=53, ioctl=16, refused=(*_IO_URING, 248, 249, 250), x32=True
)
I386: Final = SyscallTable(
    arch=0x40000003, socket=359, socketpair=360, ioctl=54, refused=(*_IO_URING, 286, 287, 288, 102)
)
AARCH64: Final = SyscallTable(
    arch=0xC00000B7, socket=198, socketpair=199, ioctl=29, refused=(*_IO_URING, 217, 218, 219)
)
ARM: Final = SyscallTable(
    arch=0x40000028, socket=281, socketpair=288, ioctl=54, refused=(*_IO_URING, 309, 310, 311, 102)
)
# The native ABI of each machine, then the compat ABI its kernel may also run.
TABLES: Final[dict[str, tuple[SyscallTable, ...]]] = {
    "x86_64": (X86_64, I386),
    "aarch64": (AARCH64, ARM),
}


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved to relative offsets."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def load(self, offset: int) -> None:
        self._code.append((_LD_W_ABS, 0, 0, offset))

    def jeq(self, value: int, yes: str | int = 0, no: str | int = 0) -> None:
        self._code.append((_JEQ_K, yes, no, value))

    def jge(self, value: int, yes: str | int = 0, no: str | int = 0) -> None:
        self._code.append((_JGE_K, yes, no, value))

    def and_(self, value: int) -> None:
        self._code.append((_AND_K, 0, 0, value))

    def ret(self, value: int) -> None:
        self._code.append((_RET_K, 0, 0, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, yes, no, k) in enumerate(self._code):
            jt, jf = (self._offset(index, target) for target in (yes, no))
            out += struct.pack("<HBBI", code, jt, jf, k)
        return bytes(out)

    def _offset(self, index: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self._labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp program: jump to {target} out of range")
        return offset


def _abi_section(prog: _Program, table: SyscallTable, *, allow_unix_sockets: bool, tag: str) -> None:
    prog.label(tag)
    prog.load(_NR)
    if table.x32:
        prog.jge(X32_SYSCALL_BIT, "kill", 0)
    prog.jeq(table.socket, f"{tag}-socket", 0)
    prog.jeq(table.socketpair, f"{tag}-pair", 0)
    prog.jeq(table.ioctl, f"{tag}-ioctl", 0)
    for number in table.refused:
        prog.jeq(number, "deny", 0)
    prog.ret(_ALLOW)

    prog.label(f"{tag}-socket")
    prog.load(_ARG0)
    families = (AF_INET, AF_INET6, AF_NETLINK, *((AF_UNIX,) if allow_unix_sockets else ()))
    for family in families:
        prog.jeq(family, "allow", 0)
    prog.ret(_ERRNO | errno.EPERM)

    prog.label(f"{tag}-pair")
    prog.load(_ARG0)
    prog.jeq(AF_UNIX, 0, "deny")
    if not allow_unix_sockets:
        prog.load(_ARG1)
        prog.and_(SOCK_TYPE_MASK)
        prog.jeq(SOCK_DGRAM, "deny", "allow")
    else:
        prog.ret(_ALLOW)

    prog.label(f"{tag}-ioctl")
    prog.load(_ARG1)
    prog.jeq(TIOCSTI, "deny", 0)
    prog.jeq(TIOCLINUX, "deny", "allow")


def build_filter(*, allow_unix_sockets: bool = False, machine: str | None = None) -> bytes:
    """The filter program (``struct sock_filter`` array) for ``machine`` (default: this one)."""
    name = machine or platform.machine()
    tables = TABLES.get(name)
    if tables is None or sys.byteorder != "little":
        raise UsageError(
            f"the sandbox's system-call filter has no table for this machine ({name}); "
            f"supported: {', '.join(TABLES)} — run tether without --sandbox on this machine"
        )
    prog = _Program()
    prog.load(_ARCH)
    for index, table in enumerate(tables):
        prog.jeq(table.arch, f"abi{index}", 0)
    prog.ret(_KILL_PROCESS)
    for index, table in enumerate(tables):
        _abi_section(prog, table, allow_unix_sockets=allow_unix_sockets, tag=f"abi{index}")
    # Shared verdicts last: classic BPF jumps only forward.
    prog.label("kill")
    prog.ret(_KILL_PROCESS)
    prog.label("deny")
    prog.ret(_ERRNO | errno.EPERM)
    prog.label("allow")
    prog.ret(_ALLOW)
    return prog.assemble()
