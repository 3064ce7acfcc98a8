"""Run a command as a tether that may not create user namespaces, as on a machine that forbids them.

``python tests/no_userns.py CMD ARG…`` (as root): forks a child into a user namespace of its own
where root is seen as an ordinary user (uid and gid ``USER_ID``, 1000; nobody is uid 0 there),
sets ``user.max_user_namespaces`` to 0 in it — the limit holds for that namespace and every one
below it, and nothing outside changes — and execs CMD, which (not being uid 0 there) keeps no
capability: it and everything it starts run as a user other than root, so bubblewrap (not setuid on
Debian) must create a user namespace and is refused, as where ``sysctl user.max_user_namespaces=0``
(or ``kernel.unprivileged_userns_clone=0``) forbids it. Files are reached as before (the kernel's
uid is still root's), so the test's interpreter, source tree and ``TETHER_HOME`` need no change of
owner; they show as owned by ``USER_ID``. Exits with CMD's status.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CLONE_NEWUSER = 0x10000000
USER_ID = 1000


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    unshared_r, unshared_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(unshared_r)
        os.close(mapped_w)
        if libc.unshare(_CLONE_NEWUSER) != 0:
            os._exit(125)
        os.write(unshared_w, b"u")
        if os.read(mapped_r, 1) != b"m":
            os._exit(125)
        # Allowed by the capabilities a new user namespace gives its creator, until the exec.
        with open("/proc/sys/user/max_user_namespaces", "w") as limit:
            limit.write("0")
        os.execvp(argv[0], argv)
    os.close(unshared_w)
    os.close(mapped_r)
    if os.read(unshared_r, 1) == b"u":
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as mapping:
                mapping.write(f"{USER_ID} 0 1\n")
        os.write(mapped_w, b"m")
    os.close(mapped_w)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
