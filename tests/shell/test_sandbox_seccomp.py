"""The system-call filter: its program evaluated by a classic-BPF interpreter for every ABI it has a
table for (only x86_64 runs here), and the real kernel's verdicts inside bubblewrap."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from hang import HANG_S
from tether.errors import UsageError
from tether.shell.sandbox.launch import filter_fd
from tether.shell.sandbox.seccomp import (
    AARCH64,
    AF_INET,
    AF_INET6,
    AF_NETLINK,
    AF_UNIX,
    ARM,
    I386,
    SOCK_DGRAM,
    TIOCSTI,
    X32_SYSCALL_BIT,
    X86_64,
    SyscallTable,
    build_filter,
)

ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | 1
SOCK_STREAM, AF_VSOCK = 1, 40


def run_filter(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a seccomp program on one ``struct seccomp_data`` (the subset of cBPF it uses)."""
    padded = (*args, *([0] * (6 - len(args))))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *padded)
    code = [struct.unpack_from("<HBBI", program, offset) for offset in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op in (0x15, 0x35):  # jeq / jge #k
            pc += jt if (acc == k if op == 0x15 else acc >= k) else jf
        elif op == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


@pytest.mark.parametrize(
    ("machine", "native", "compat"), [("x86_64", X86_64, I386), ("aarch64", AARCH64, ARM)]
)
def test_every_abi_refuses_unix_sockets_and_the_rest(
    machine: str, native: SyscallTable, compat: SyscallTable
) -> None:
    program = build_filter(machine=machine)
    for table in (native, compat):

        def verdict(nr: int, *args: int, table: SyscallTable = table) -> int:
            return run_filter(program, arch=table.arch, nr=nr, args=args)

        assert verdict(table.socket, AF_UNIX, SOCK_STREAM) == EPERM
        assert verdict(table.socket, AF_VSOCK, SOCK_STREAM) == EPERM
        for family in (AF_INET, AF_INET6, AF_NETLINK):
            assert verdict(table.socket, family, SOCK_STREAM) == ALLOW
        # Only the low 32 bits count, as in the kernel: high garbage neither hides nor helps.
        assert verdict(table.socket, (1 << 32) | AF_UNIX, SOCK_STREAM) == EPERM
        assert verdict(table.socketpair, AF_UNIX, SOCK_STREAM) == ALLOW
        assert verdict(table.socketpair, AF_UNIX, SOCK_DGRAM | 0o2000000) == EPERM  # SOCK_CLOEXEC too
        assert verdict(table.socketpair, AF_INET, SOCK_STREAM) == EPERM
        assert verdict(table.ioctl, 0, TIOCSTI) == EPERM
        assert verdict(table.ioctl, 0, (1 << 32) | TIOCSTI) == EPERM
        assert verdict(table.ioctl, 0, 0x5401) == ALLOW  # TCGETS
        for number in table.refused:
            assert verdict(number) == EPERM
        assert verdict(0) == ALLOW  # read / io_setup: everything else passes
    assert run_filter(program, arch=0xDEAD, nr=0) == KILL  # an ABI without a table
    if native.x32:
        assert run_filter(program, arch=native.arch, nr=X32_SYSCALL_BIT | native.socket) == KILL


def test_the_deployment_grant_lets_unix_sockets_through() -> None:
    program = build_filter(allow_unix_sockets=True, machine="x86_64")
    assert run_filter(program, arch=X86_64.arch, nr=X86_64.socket, args=(AF_UNIX, SOCK_STREAM)) == ALLOW
    assert run_filter(program, arch=X86_64.arch, nr=X86_64.socketpair, args=(AF_UNIX, SOCK_DGRAM)) == ALLOW
    assert run_filter(program, arch=X86_64.arch, nr=X86_64.socket, args=(AF_VSOCK, SOCK_STREAM)) == EPERM


def test_an_unknown_machine_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match="no table for this machine"):
        build_filter(machine="riscv64")


PROBE = """
import ctypes, socket
def attempt(name, call):
    try:
        call()
        print(name, "allowed")
    except OSError as exc:
        print(name, exc.errno)
attempt("unix", lambda: socket.socket(socket.AF_UNIX))
attempt("inet", lambda: socket.socket(socket.AF_INET))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("stream-pair", lambda: socket.socketpair())
attempt("dgram-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
libc = ctypes.CDLL(None, use_errno=True)
for name, number in (("io_uring_setup", 425), ("keyctl", 250)):
    result = libc.syscall(number, 8, 0)
    print(name, result, ctypes.get_errno())
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86_64 syscall numbers")
def test_the_kernel_applies_the_filter_inside_bubblewrap() -> None:
    fd = filter_fd(build_filter())
    try:
        done = subprocess.run(
            ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
             "--unshare-net", "--cap-drop", "ALL", "--seccomp", str(fd), "--",
             os.path.realpath(sys.executable), "-c", PROBE],
            pass_fds=(fd,), capture_output=True, text=True, timeout=HANG_S, check=False,
        )  # fmt: skip
    finally:
        os.close(fd)
    assert done.stdout.splitlines() == [
        "unix 1",
        "inet allowed",
        "vsock 1",
        "stream-pair allowed",
        "dgram-pair 1",
        "io_uring_setup -1 1",
        "keyctl -1 1",
    ], done.stderr
