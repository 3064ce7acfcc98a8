"""Keeping what a persistent shell starts below it, and telling tether's own processes apart.

Invariant: a program run through ``adopting_command`` keeps every process it starts as its
descendant for as long as that process lives. The program is made a child subreaper
(``PR_SET_CHILD_SUBREAPER``, which ``execve`` keeps), so a process whose parent ends is handed to
it instead of to PID 1, however that process left its session, group or environment (``env -i
setsid x &``, ``sudo``, a daemon's double fork). The tree below it is then the whole of what it
started, which is what ending a shell's processes needs. It is otherwise the program ``exec argv``
would run: the same pid, environment (less the names asked to go), signal dispositions and
descriptors (where this interpreter cannot name its executable, the program runs without the
flag). bash reaps the orphans handed to it (an unknown child is not one of its jobs: ``wait``,
``jobs`` and ``$!`` are unchanged).

Invariant: a process of tether's own that outlives whatever started it (the tmux server, the
command line's tools process) carries ``OWN_PROCESS`` in its environment from its start, and the
shells never inherit it. Started from inside a shell, such a process becomes the shell's
descendant; ending the shell spares it (``strays``).

Standard library only and cheap to import: the command line's client starts the tools process.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

OWN_PROCESS = "TETHER_DAEMON"

# Run by ``python -I -S`` (no site, no environment variables, no working directory on the path: a
# ``ctypes.py`` beside the shell is not imported) with the pane's ``LC_CTYPE`` (value, and "1" if
# set), the names to unset and the program's argv. Before the exec:
# - Python's start-up ignores SIGPIPE and SIGXFSZ, which an exec keeps and bash could not undo for
#   anything it runs ("signals ignored upon entry"); tmux started the pane with every one default;
# - Python's locale coercion (PEP 538) sets ``LC_CTYPE`` under a C locale: the pane's own value, or
#   its absence, is put back;
# - its name (``comm``, what ``ps`` and tmux show) is the program's from the start, so nothing looking
#   at the pane in the moment before the exec takes the launcher for a program the shell runs.
# An interpreter without ctypes runs the program unadopted rather than not at all. 36 is
# ``PR_SET_CHILD_SUBREAPER``, 15 ``PR_SET_NAME``. It also runs on a remote host's ``python3``
# (``hosts.ssh``), whatever its version: nothing in it newer than Python 3.4 (``-I``).
_SOURCE = """\
import os, signal, sys
ctype, had_ctype, unset, program = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
try:
    import ctypes
    libc = ctypes.CDLL(None)
    libc.prctl(36, 1, 0, 0, 0)
    libc.prctl(15, os.path.basename(program[0]).encode()[:15], 0, 0, 0)
except Exception:
    pass
for sig in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(sig, signal.SIG_DFL)
if had_ctype:
    os.environ["LC_CTYPE"] = ctype
else:
    os.environ.pop("LC_CTYPE", None)
for name in unset:
    os.environ.pop(name, None)
try:
    os.execvp(program[0], program)
except OSError as exc:
    sys.stderr.write(program[0] + ": " + exc.strerror + chr(10))
    os._exit(127)
"""
# One line, through ``exec``: tmux takes a pane command as one line of a control command (no
# newline; no ``#`` or ``%`` either, which tmux may read as its own).
_ADOPT = f"exec({_SOURCE!r})"


def adopting_command(argv: Sequence[str], *, unset: Sequence[str] = (), python: str | None = None) -> str:
    """A POSIX ``sh`` command line that execs ``argv`` as a child subreaper, without the
    environment variables ``unset``. ``python``: the interpreter that runs the launcher (another
    machine's ``python3``, any 3.x with ``-I`` and ctypes); this one's by default."""
    if not argv or any(not name or " " in name for name in unset):
        raise ValueError("adopting_command needs a program and names without spaces")
    interpreter = python if python is not None else sys.executable
    if not interpreter:  # an embedding interpreter that cannot name itself: no launcher to run
        unsets = [f"-u {shlex.quote(name)}" for name in unset]
        return " ".join(["exec", "env", *unsets, *(shlex.quote(word) for word in argv)])
    words = [interpreter, "-I", "-S", "-c", _ADOPT]
    return " ".join(
        [
            "exec",
            *(shlex.quote(word) for word in words),
            '"${LC_CTYPE-}"',
            '"${LC_CTYPE+1}"',
            shlex.quote(" ".join(unset)),
            *(shlex.quote(word) for word in argv),
        ]
    )


def launcher_check() -> str:
    """A ``python -c`` program that exits 0 where the launcher can make a subreaper (the
    interpreter has ctypes, the C library a ``prctl``: Linux) and prints the interpreter's own
    executable (a shim that ran it is not paid again). Run with ``-I -S``, as the launcher is."""
    return "import ctypes, sys; ctypes.CDLL(None).prctl; print(sys.executable)"
